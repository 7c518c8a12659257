//! Replays every stream case in `tests/cases` and `tests/own-cases` (or `$TOKENPROBE_CASES_DIR`
//! alone) against the real `tokenprobe probe` and checks every value of the case's `.expect.json`.
//!
//! All cases run at once (wall time ~ the longest case, ~10 s); every mismatch of every case is
//! reported, then the test fails. Probers are started one at a time (the next starts once the
//! previous one's request has arrived), so process start-up on a small machine does not shift
//! what the others measure; a case that failed only on timings outside the tolerance is run again,
//! alone, up to [`MAX_ATTEMPTS`] times in all, and its earlier attempts are shown in the report.
//! Run with `cargo test --test core replay:: -- --nocapture` to see the per-case report when all pass.
//!
//! Environment knobs:
//! - `TOKENPROBE_CASES_DIR`: another case directory.
//! - `TOKENPROBE_CASE`: run only the cases whose name contains this string.
//! - `TOKENPROBE_REPLAY_SERIAL=1`: run the cases one after another (to rule out CPU contention).
//! - `TOKENPROBE_REPLAY_ATTEMPTS=<n>`: attempts for timing-only failures (default 3; 1 = no rerun).
//! - `TOKENPROBE_BIN`: another tokenprobe binary.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout, timeout_at};

use common::case::{Case, End, gzip_one_member, parse_secs};
use common::replay_server::{ReceivedRequest, ReplayHandle, ReplayServer};
use common::{
    PROXY_ENV_VARS, case_name, cases_dir, default_cases_dir, expect_files, tokenprobe_bin,
};

/// The keys of `tokenprobe probe --format json`, exactly.
const OUTPUT_KEYS: [&str; 21] = [
    "outcome",
    "error_type",
    "ttfb_s",
    "ttft_s",
    "ttfo_s",
    "e2e_s",
    "output_tokens",
    "token_source",
    "input_tokens",
    "tpot_s",
    "decode_tokens_per_s",
    "chunk_gaps_s",
    "chunk_gaps_dropped",
    "flags",
    "retry_after_s",
    "cached_input_tokens",
    "reasoning_tokens",
    "served_model",
    "system_fingerprint",
    "response_id",
    "request_id",
];
/// Expect-file keys that are not output values.
const META_KEYS: [&str; 6] = [
    "case",
    "api",
    "request",
    "requests_received",
    "tolerance_s",
    "notes",
];

/// Hard bound on the whole replay (concurrent run); a hung prober cannot hang CI.
const OVERALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Hard bound when `TOKENPROBE_REPLAY_SERIAL` is set.
const OVERALL_TIMEOUT_SERIAL: Duration = Duration::from_secs(180);
/// A case that failed only on timings is run up to this many times in all (later runs alone);
/// `TOKENPROBE_REPLAY_ATTEMPTS` overrides it.
const MAX_ATTEMPTS: usize = 3;
/// Hard bound on one prober run; it is killed after that.
const PROBE_TIMEOUT: Duration = Duration::from_secs(45);
/// How long a starting prober may hold the start gate without its request arriving.
const START_GATE_TIMEOUT: Duration = Duration::from_secs(2);
/// The env var through which case 25's wrong key is handed to the prober.
const KEY_ENV: &str = "TP_TEST_KEY";

/// What a case's `notes` ask the harness to arrange beyond a plain replay with default deadlines.
#[derive(Default)]
struct Arrangement {
    extra_args: Vec<String>,
    api_key: Option<&'static str>,
    via_proxy: bool,
}

fn arrangement(case: &str, notes: &str) -> Arrangement {
    let mut arr = match case.split('-').next().unwrap_or("") {
        // "Configure the probe with a wrong API key"
        "25" => Arrangement {
            api_key: Some("sk-wrong-key"),
            ..Default::default()
        },
        // "Run the replay as the forward PROXY ..."
        "31" => Arrangement {
            via_proxy: true,
            ..Default::default()
        },
        _ => Arrangement::default(),
    };
    arr.extra_args = deadline_args(notes);
    arr
}

/// `--timeout-*` flags for the deadlines a case's notes configure, e.g. "Configure deadlines
/// first_token=10 s, idle=1 s, total=4 s." (a deadline not named keeps its default).
fn deadline_args(notes: &str) -> Vec<String> {
    let Some(at) = notes.find("Configure deadlines") else {
        return Vec::new();
    };
    let sentence = notes[at..].split(['.', ';', '(']).next().unwrap_or("");
    let mut args = Vec::new();
    for part in sentence.split([',', ' ']).filter(|p| p.contains('=')) {
        let Some((name, value)) = part.split_once('=') else {
            continue;
        };
        let flag = match name.trim() {
            "first_token" => "--timeout-first-token",
            "idle" => "--timeout-idle",
            "total" => "--timeout-total",
            "connect" => "--timeout-connect",
            _ => continue,
        };
        // "10 s": the unit follows the number after a space.
        let rest = &sentence[sentence.find(part).unwrap_or(0) + part.len()..];
        let unit = rest.trim_start().split([',', ' ']).next().unwrap_or("s");
        args.extend([flag.to_string(), format!("{}{unit}", value.trim())]);
    }
    args
}

#[test]
fn deadlines_are_read_from_the_notes() {
    assert_eq!(
        deadline_args("x. Configure deadlines first_token=10 s, idle=1 s, total=4 s. More."),
        [
            "--timeout-first-token",
            "10s",
            "--timeout-idle",
            "1s",
            "--timeout-total",
            "4s"
        ]
    );
    assert_eq!(
        deadline_args(
            "Configure deadlines first_token=10 s, idle=60 s, total=120 s (connect default)"
        ),
        [
            "--timeout-first-token",
            "10s",
            "--timeout-idle",
            "60s",
            "--timeout-total",
            "120s"
        ]
    );
    assert!(deadline_args("nothing to configure").is_empty());
}

/// The base URL suffix each protocol appends to `--base-url`.
fn protocol_suffix(api: &str) -> Option<&'static str> {
    match api {
        "openai-chat" => Some("/chat/completions"),
        "openai-completions" => Some("/completions"),
        "openai-responses" => Some("/responses"),
        "anthropic-messages" => Some("/v1/messages"),
        _ => None,
    }
}

struct CaseReport {
    name: String,
    problems: Vec<String>,
    command: String,
    exit: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
    /// The largest timing deviation from the expect file, signed (for judging the margin).
    worst_timing: Option<f64>,
    /// How many of `problems` are timings outside the tolerance (both sides numbers), which CPU
    /// contention can cause; a case with only those is run again, alone.
    timing_problems: usize,
    /// The problems of earlier attempts, when the case was run again.
    earlier_attempts: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// The replay test
// ---------------------------------------------------------------------------------------------

#[test]
fn replay_all_cases() {
    let dir = cases_dir();
    let mut files = expect_files(&dir)
        .unwrap_or_else(|e| panic!("cannot list cases in {}: {e}", dir.display()));
    if std::env::var_os("TOKENPROBE_CASES_DIR").is_none() {
        // The project's own cases, for rulings no shared case covers yet (tests/own-cases/README.md).
        let own = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/own-cases");
        files.extend(
            expect_files(&own)
                .unwrap_or_else(|e| panic!("cannot list cases in {}: {e}", own.display())),
        );
    }
    if let Ok(filter) = std::env::var("TOKENPROBE_CASE") {
        files.retain(|f| case_name(f).contains(&filter));
    }
    assert!(
        !files.is_empty(),
        "no *.expect.json cases in {}",
        dir.display()
    );
    let bin = tokenprobe_bin();
    assert!(
        bin.is_file(),
        "tokenprobe binary not found at {} (build it, or set TOKENPROBE_BIN)",
        bin.display()
    );
    let serial = std::env::var("TOKENPROBE_REPLAY_SERIAL").is_ok_and(|v| !v.is_empty() && v != "0");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let reports = rt.block_on(run_all(files, bin, serial));
    rt.shutdown_timeout(Duration::from_secs(2));

    let mut summary = String::new();
    for r in &reports {
        let margin = r
            .worst_timing
            .map(|w| format!(", worst timing {w:+.4} s"))
            .unwrap_or_default();
        let verdict = if r.problems.is_empty() {
            "PASS"
        } else {
            "FAIL"
        };
        summary.push_str(&format!(
            "{verdict} {} ({:.2} s{margin})\n",
            r.name,
            r.elapsed.as_secs_f64()
        ));
        for earlier in &r.earlier_attempts {
            summary.push_str(&format!("    (earlier {earlier})\n"));
        }
        if r.problems.is_empty() {
            continue;
        }
        for p in &r.problems {
            summary.push_str(&format!("    - {p}\n"));
        }
        if !r.command.is_empty() {
            summary.push_str(&format!("    command: {}\n", r.command));
        }
        if let Some(code) = r.exit {
            summary.push_str(&format!("    exit code: {code}\n"));
        }
        if !r.stdout.trim().is_empty() {
            summary.push_str(&format!("    stdout: {}\n", tail(&r.stdout, 2000)));
        }
        if !r.stderr.trim().is_empty() {
            summary.push_str(&format!("    stderr: {}\n", tail(&r.stderr, 2000)));
        }
    }
    println!("{summary}");
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.problems.is_empty())
        .map(|r| r.name.as_str())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} stream cases failed (details above): {failed:?}",
        failed.len(),
        reports.len()
    );
}

async fn run_all(mut files: Vec<PathBuf>, bin: PathBuf, serial: bool) -> Vec<CaseReport> {
    // Longest cases first, so the wall time is about the longest case.
    files.sort_by_cached_key(|f| {
        let txt = f.with_file_name(format!("{}.txt", case_name(f)));
        std::cmp::Reverse(Case::load(&txt).map_or(Duration::ZERO, |c| c.last_instant()))
    });
    let limit = if serial {
        OVERALL_TIMEOUT_SERIAL
    } else {
        OVERALL_TIMEOUT
    };
    let deadline = Instant::now() + limit;
    let bin = Arc::new(bin);
    let concurrency = if serial { 1 } else { files.len() };
    let mut reports: BTreeMap<String, CaseReport> = run_batch(&files, &bin, concurrency, deadline)
        .await
        .into_iter()
        .map(|r| (r.name.clone(), r))
        .collect();
    for name in files.iter().map(|f| case_name(f)) {
        reports.entry(name.clone()).or_insert_with(|| {
            let problem = format!("did not finish within the overall {limit:?} (prober killed)");
            CaseReport::failed(&name, problem)
        });
    }
    // Timing-only failures may be CPU contention on a busy machine: run them again, alone.
    let attempts = std::env::var("TOKENPROBE_REPLAY_ATTEMPTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(MAX_ATTEMPTS);
    for attempt in 2..=attempts {
        let again: Vec<PathBuf> = files
            .iter()
            .filter(|f| {
                reports
                    .get(&case_name(f))
                    .is_some_and(CaseReport::timing_only)
            })
            .cloned()
            .collect();
        if again.is_empty() || Instant::now() >= deadline {
            break;
        }
        for mut new in run_batch(&again, &bin, 1, deadline).await {
            if let Some(old) = reports.remove(&new.name) {
                new.earlier_attempts = old.earlier_attempts;
                new.earlier_attempts.push(format!(
                    "attempt {}: {}",
                    attempt - 1,
                    old.problems.join("; ")
                ));
            }
            reports.insert(new.name.clone(), new);
        }
    }
    reports.into_values().collect()
}

/// Run `files` with at most `concurrency` at once; the reports of those finished by `deadline`
/// (the others are aborted, their probers killed).
async fn run_batch(
    files: &[PathBuf],
    bin: &Arc<PathBuf>,
    concurrency: usize,
    deadline: Instant,
) -> Vec<CaseReport> {
    let permits = Arc::new(Semaphore::new(concurrency));
    let start_gate = Arc::new(Semaphore::new(1));
    let mut set = JoinSet::new();
    let mut names = HashMap::new(); // task id -> case name
    for file in files {
        let (permits, gate, bin) = (permits.clone(), start_gate.clone(), bin.clone());
        let (file, name) = (file.clone(), case_name(file));
        let task = set.spawn(async move {
            let _permit = permits.acquire_owned().await;
            run_case(&file, &bin, &gate).await
        });
        names.insert(task.id(), name);
    }
    let mut reports = Vec::new();
    loop {
        match timeout_at(deadline, set.join_next()).await {
            Ok(Some(Ok(report))) => reports.push(report),
            Ok(Some(Err(e))) => {
                let name = names.get(&e.id()).cloned().unwrap_or_default();
                let problem = format!("the case task failed: {e}");
                reports.push(CaseReport::failed(&name, problem));
            }
            Ok(None) => break,
            Err(_) => {
                // Aborting drops the tasks, whose children are killed (kill_on_drop).
                set.abort_all();
                while set.join_next().await.is_some() {}
                break;
            }
        }
    }
    reports
}

impl CaseReport {
    fn new(name: &str) -> CaseReport {
        CaseReport {
            name: name.to_string(),
            problems: Vec::new(),
            command: String::new(),
            exit: None,
            stdout: String::new(),
            stderr: String::new(),
            elapsed: Duration::ZERO,
            worst_timing: None,
            timing_problems: 0,
            earlier_attempts: Vec::new(),
        }
    }

    /// Failed only by timings outside the tolerance: worth one more run, alone.
    fn timing_only(&self) -> bool {
        !self.problems.is_empty() && self.problems.len() == self.timing_problems
    }

    fn failed(name: &str, problem: String) -> CaseReport {
        let mut report = CaseReport::new(name);
        report.problems.push(problem);
        report
    }
}

async fn run_case(expect_path: &Path, bin: &Path, start_gate: &Semaphore) -> CaseReport {
    let started = Instant::now();
    let mut report = CaseReport::new(&case_name(expect_path));
    if let Err(e) = replay_case(expect_path, bin, start_gate, &mut report).await {
        report.problems.push(e);
    }
    report.elapsed = started.elapsed();
    report
}

/// Replay one case and push every mismatch into `report.problems`. `Err` = could not even run it.
#[expect(
    clippy::too_many_lines,
    reason = "every value of a case's expect file is checked here, in the file's order"
)]
async fn replay_case(
    expect_path: &Path,
    bin: &Path,
    start_gate: &Semaphore,
    report: &mut CaseReport,
) -> Result<(), String> {
    let name = report.name.clone();
    let text = std::fs::read_to_string(expect_path)
        .map_err(|e| format!("reading {}: {e}", expect_path.display()))?;
    let expect: Value =
        serde_json::from_str(&text).map_err(|e| format!("expect file is not JSON: {e}"))?;
    let expect = expect
        .as_object()
        .ok_or("expect file is not a JSON object")?;
    let case = Case::load(&expect_path.with_file_name(format!("{name}.txt")))?;

    for key in expect.keys() {
        if !OUTPUT_KEYS.contains(&key.as_str()) && !META_KEYS.contains(&key.as_str()) {
            report.problems.push(format!(
                "expect key `{key}`: the harness does not know how to check it"
            ));
        }
    }
    if let Some(c) = expect.get("case")
        && c.as_str() != Some(name.as_str())
    {
        report
            .problems
            .push(format!("expect `case` is {c}, the file is {name}"));
    }
    let api = expect
        .get("api")
        .and_then(Value::as_str)
        .ok_or("expect has no `api`")?;
    let request = expect
        .get("request")
        .and_then(Value::as_object)
        .ok_or("expect has no `request`")?;
    let path = request
        .get("path")
        .and_then(Value::as_str)
        .ok_or("expect has no `request.path`")?;
    let suffix = protocol_suffix(api).ok_or_else(|| format!("unknown api {api:?}"))?;
    let prefix = path
        .strip_suffix(suffix)
        .ok_or_else(|| format!("request.path {path:?} does not end with {suffix:?} for {api}"))?;
    // The model asked for: the case's, else the one its recorded answer names (a case's request
    // model is anonymized; asking for another would flag `model_mismatch`, which the shared
    // expectations, older than that flag, do not know), else `example-model`.
    let named = answered_model(&case.path);
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .or(named.as_deref())
        .unwrap_or("example-model");
    let tolerance = expect
        .get("tolerance_s")
        .and_then(Value::as_f64)
        .ok_or("expect has no numeric `tolerance_s`")?;
    let notes = expect.get("notes").and_then(Value::as_str).unwrap_or("");
    let arr = arrangement(&name, notes);

    // The server that answers (the proxy in the proxy case), and where the probe is pointed.
    let (server_addr, server) = ReplayServer::start(&case)
        .await
        .map_err(|e| format!("starting the replay server: {e}"))?;
    let sink: Option<(SocketAddr, ReplayHandle)> = if arr.via_proxy {
        Some(
            ReplayServer::start_sink()
                .await
                .map_err(|e| format!("starting the target listener: {e}"))?,
        )
    } else {
        None
    };
    let target_addr = sink.as_ref().map_or(server_addr, |(a, _)| *a);
    let base_url = format!("http://{target_addr}{prefix}");

    let mut args: Vec<String> = [
        "probe",
        "--base-url",
        &base_url,
        "--model",
        model,
        "--api",
        api,
        "--format",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(n) = request
        .get("max_tokens")
        .or_else(|| request.get("max_output_tokens"))
    {
        args.extend(["--max-tokens".to_string(), n.to_string()]);
    }
    if arr.api_key.is_some() {
        args.extend(["--api-key-env".to_string(), KEY_ENV.to_string()]);
    }
    args.extend(arr.extra_args.iter().cloned());

    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in PROXY_ENV_VARS {
        cmd.env_remove(var);
    }
    cmd.env_remove(KEY_ENV);
    let mut env_note = String::new();
    if arr.via_proxy {
        let proxy = format!("http://{server_addr}");
        cmd.env("HTTP_PROXY", &proxy).env("http_proxy", &proxy);
        env_note.push_str(&format!("HTTP_PROXY={proxy} http_proxy={proxy} "));
    }
    if let Some(key) = arr.api_key {
        cmd.env(KEY_ENV, key);
        env_note.push_str(&format!("{KEY_ENV}={key} "));
    }
    report.command = format!("{env_note}{} {}", bin.display(), args.join(" "));

    // Probers start one at a time: a process start-up burst on a small machine would otherwise
    // delay other probers between their t0 and their request, shifting every instant they measure.
    // The gate opens again once this prober's request has arrived (or it has exited).
    let gate = start_gate.acquire().await;
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let mut run = Box::pin(timeout(PROBE_TIMEOUT, child.wait_with_output()));
    let mut finished = None;
    tokio::select! {
        _ = server.wait_for_requests(1) => {}
        res = &mut run => finished = Some(res),
        _ = tokio::time::sleep(START_GATE_TIMEOUT) => {}
    }
    drop(gate);
    let result = match finished {
        Some(res) => res,
        None => run.await,
    };
    let output = match result {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("waiting for the prober: {e}")),
        // Dropping the future drops the child, which kill_on_drop kills.
        Err(_) => {
            return Err(format!(
                "the prober did not exit within {PROBE_TIMEOUT:?} (killed)"
            ));
        }
    };
    report.exit = output.status.code();
    report.stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    report.stderr = String::from_utf8_lossy(&output.stderr).into_owned();

    // What the server saw.
    let requests = server.requests();
    for e in server.errors() {
        report.problems.push(format!("replay server: {e}"));
    }
    let expected_target = match &sink {
        Some((addr, _)) => format!("http://{addr}{path}"),
        None => path.to_string(),
    };
    for (i, req) in requests.iter().enumerate() {
        for p in check_request(req, request, api, model, &expected_target, arr.api_key) {
            report.problems.push(format!("request #{}: {p}", i + 1));
        }
    }
    if let Some((addr, sink)) = &sink
        && sink.requests_received() != 0
    {
        report.problems.push(format!(
            "the target {addr} behind the proxy received {} request(s); all must go through the proxy",
            sink.requests_received()
        ));
    }
    if let Some(exp) = expect.get("requests_received") {
        let got = requests.len();
        if exp.as_u64() != Some(got as u64) {
            report
                .problems
                .push(format!("requests_received: expected {exp}, got {got}"));
        }
    }

    // What the prober said.
    let out: Value = match serde_json::from_str(report.stdout.trim()) {
        Ok(v) => v,
        Err(e) => {
            report
                .problems
                .push(format!("stdout is not one JSON object: {e}"));
            return Ok(());
        }
    };
    let Some(out) = out.as_object() else {
        report
            .problems
            .push("stdout JSON is not an object".to_string());
        return Ok(());
    };
    report
        .problems
        .extend(check_output_shape(out, output.status.code()));
    // The shared expectations are older than `model_mismatch`: a case that asks for one model
    // and whose recording names another (neither ASCII case nor anything else set apart) expects
    // it too.
    let mut expect = expect.clone();
    if let (Some(asked), Some(named)) = (request.get("model").and_then(Value::as_str), &named)
        && !asked.eq_ignore_ascii_case(named)
        && let Some(Value::Array(flags)) = expect.get_mut("flags")
    {
        flags.push(Value::from("model_mismatch"));
    }
    for (problem, timing) in compare(&expect, out, tolerance) {
        report.problems.push(problem);
        report.timing_problems += usize::from(timing);
    }
    report.worst_timing = worst_timing(&expect, out);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// What every request must look like: the case's path, `"stream": true`, `Accept-Encoding:
/// identity`, and the `request` values of the expect file.
fn check_request(
    req: &ReceivedRequest,
    expected: &Map<String, Value>,
    api: &str,
    model: &str,
    expected_target: &str,
    api_key: Option<&str>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if req.method != "POST" {
        problems.push(format!("method {}, expected POST", req.method));
    }
    if req.target != expected_target {
        problems.push(format!(
            "request-target {:?}, expected {expected_target:?}",
            req.target
        ));
    }
    match req.header("accept-encoding") {
        Some(v) if v.trim().eq_ignore_ascii_case("identity") => {}
        other => problems.push(format!(
            "Accept-Encoding is {other:?}, expected \"identity\""
        )),
    }
    if let Some(key) = api_key {
        let (header, want) = if api.starts_with("anthropic") {
            ("x-api-key", key.to_string())
        } else {
            ("authorization", format!("Bearer {key}"))
        };
        if req.header(header) != Some(want.as_str()) {
            problems.push(format!(
                "{header} is {:?}, expected {want:?}",
                req.header(header)
            ));
        }
    }
    let body = match req.body_json() {
        Ok(b) => b,
        Err(e) => {
            problems.push(e);
            return problems;
        }
    };
    if body.get("stream") != Some(&Value::Bool(true)) {
        problems.push(format!(
            "body \"stream\" is {:?}, expected true",
            body.get("stream")
        ));
    }
    if body.get("model").and_then(Value::as_str) != Some(model) {
        problems.push(format!(
            "body \"model\" is {:?}, expected {model:?}",
            body.get("model")
        ));
    }
    for (key, want) in expected {
        match key.as_str() {
            "path" | "stream" | "model" => {} // checked above
            // Each protocol's name for the output cap.
            "max_tokens" | "max_output_tokens" => {
                let got = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
                    .iter()
                    .find_map(|k| body.get(*k));
                if got != Some(want) {
                    problems.push(format!("body max tokens is {got:?}, expected {want}"));
                }
            }
            "stream_options" => {
                // include_usage is what the contract asks for; other options (vLLM's
                // continuous_usage_stats) describe the original bug report's request only.
                if want.get("include_usage") == Some(&Value::Bool(true)) {
                    let got = body.pointer("/stream_options/include_usage");
                    if got != Some(&Value::Bool(true)) {
                        problems.push(format!(
                            "body stream_options.include_usage is {got:?}, expected true"
                        ));
                    }
                }
            }
            other => problems.push(format!(
                "expect request.{other}: the harness does not check it"
            )),
        }
    }
    if !problems.is_empty() {
        problems.push(format!(
            "(request was: {}{})",
            req.head_text().replace('\n', " | "),
            String::from_utf8_lossy(&req.body)
        ));
    }
    problems
}

/// The first model a case's recorded answer names (`"model":"..."` in its RAW section).
fn answered_model(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let raw: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let at = raw.find("\"model\":")? + "\"model\":".len();
    let rest = raw[at..].trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

/// Exactly the documented keys, the right JSON types, and an exit code matching the outcome.
fn check_output_shape(out: &Map<String, Value>, exit: Option<i32>) -> Vec<String> {
    let mut problems = Vec::new();
    let keys: BTreeSet<&str> = out.keys().map(String::as_str).collect();
    let want: BTreeSet<&str> = OUTPUT_KEYS.into_iter().collect();
    let missing: Vec<_> = want.difference(&keys).collect();
    let extra: Vec<_> = keys.difference(&want).collect();
    if !missing.is_empty() {
        problems.push(format!("output lacks keys {missing:?}"));
    }
    if !extra.is_empty() {
        problems.push(format!("output has unexpected keys {extra:?}"));
    }
    let outcome = out.get("outcome").and_then(Value::as_str);
    match (outcome, exit) {
        (Some("success"), Some(0)) | (Some("error"), Some(1)) => {}
        (Some(o @ ("success" | "error")), code) => problems.push(format!(
            "exit code {code:?} does not match outcome {o:?} (0 = success, 1 = error)"
        )),
        (o, _) => problems.push(format!(
            "outcome is {o:?}, expected \"success\" or \"error\""
        )),
    }
    let is = |k: &str, ok: fn(&Value) -> bool| out.get(k).is_none_or(ok);
    for k in [
        "ttfb_s",
        "ttft_s",
        "ttfo_s",
        "e2e_s",
        "tpot_s",
        "decode_tokens_per_s",
        "retry_after_s",
    ] {
        if !is(k, |v| v.is_null() || v.is_number()) {
            problems.push(format!("{k} is {}, expected a number or null", out[k]));
        }
    }
    for k in ["output_tokens", "input_tokens"] {
        if !is(k, |v| v.is_null() || v.is_u64()) {
            problems.push(format!("{k} is {}, expected an integer or null", out[k]));
        }
    }
    for k in ["error_type", "token_source"] {
        if !is(k, |v| v.is_null() || v.is_string()) {
            problems.push(format!("{k} is {}, expected a string or null", out[k]));
        }
    }
    if !is("chunk_gaps_s", |v| {
        v.as_array().is_some_and(|a| a.iter().all(Value::is_number))
    }) {
        problems.push(format!(
            "chunk_gaps_s is {}, expected an array of numbers",
            out["chunk_gaps_s"]
        ));
    }
    if !is("flags", |v| {
        v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    }) {
        problems.push(format!(
            "flags is {}, expected an array of strings",
            out["flags"]
        ));
    }
    // The contract's identities: decode TPS * TPOT = 1; TTFT + TPOT * (N - 1) = t_last - t0 <= E2E.
    let num = |k: &str| out.get(k).and_then(Value::as_f64);
    if let (Some(tpot), Some(tps)) = (num("tpot_s"), num("decode_tokens_per_s"))
        && (tpot * tps - 1.0).abs() > 1e-6
    {
        problems.push(format!(
            "decode_tokens_per_s * tpot_s = {} (must be 1)",
            tpot * tps
        ));
    }
    if let (Some(ttft), Some(tpot), Some(n), Some(e2e)) = (
        num("ttft_s"),
        num("tpot_s"),
        num("output_tokens"),
        num("e2e_s"),
    ) && ttft + tpot * (n - 1.0) > e2e + 1e-6
    {
        problems.push(format!(
            "ttft_s + tpot_s * (output_tokens - 1) = {} exceeds e2e_s {e2e}",
            ttft + tpot * (n - 1.0)
        ));
    }
    problems
}

/// The case's notes say its `Retry-After` is an HTTP date.
fn notes_say_http_date(expect: &Map<String, Value>) -> bool {
    expect
        .get("notes")
        .and_then(Value::as_str)
        .is_some_and(|n| n.contains("HTTP-date"))
}

/// Every output value the expect file names, per `cases/README.md`. Each mismatch comes with
/// whether it is only a timing outside the tolerance (both sides numbers of the same shape).
fn compare(expect: &Map<String, Value>, out: &Map<String, Value>, tol: f64) -> Vec<(String, bool)> {
    let mut problems = Vec::new();
    let null = Value::Null;
    for key in OUTPUT_KEYS {
        let Some(exp) = expect.get(key) else {
            continue; // absent: not checked
        };
        let got = out.get(key).unwrap_or(&null);
        let problem = match key {
            "outcome" | "error_type" | "token_source" => {
                (exp != got).then(|| format!("expected {exp}, got {got}"))
            }
            "output_tokens" | "input_tokens" => (exp.as_u64() != got.as_u64()
                || exp.is_null() != got.is_null())
            .then(|| format!("expected {exp}, got {got}")),
            // A Retry-After written as an HTTP date (the replay renders it at its send instant, to the
            // second) is compared within 1 s, as `cases/README.md` says.
            "retry_after_s" if notes_say_http_date(expect) => check_number(exp, got, 1.0),
            "retry_after_s" => check_number(exp, got, 1e-9),
            "ttfb_s" | "ttft_s" | "ttfo_s" | "e2e_s" | "tpot_s" => check_number(exp, got, tol),
            "decode_tokens_per_s" => check_decode(exp, expect.get("tpot_s"), got, tol),
            "chunk_gaps_s" => check_gaps(exp, got, tol),
            "flags" => check_flags(exp, got),
            _ => Some("harness bug: unhandled key".to_string()),
        };
        if let Some(p) = problem {
            let timing = match key {
                "ttfb_s" | "ttft_s" | "ttfo_s" | "e2e_s" | "tpot_s" | "decode_tokens_per_s" => {
                    exp.is_number() && got.is_number()
                }
                "chunk_gaps_s" => match (exp, got) {
                    (Value::Array(e), Value::Array(g)) => e.len() == g.len(),
                    _ => false,
                },
                _ => false,
            };
            problems.push((format!("{key}: {p}"), timing));
        }
    }
    problems
}

/// The largest (by magnitude) difference got - expected over the timings both sides report.
fn worst_timing(expect: &Map<String, Value>, out: &Map<String, Value>) -> Option<f64> {
    let mut pairs: Vec<(f64, f64)> = Vec::new();
    for key in ["ttfb_s", "ttft_s", "ttfo_s", "e2e_s", "tpot_s"] {
        if let (Some(e), Some(g)) = (
            expect.get(key).and_then(Value::as_f64),
            out.get(key).and_then(Value::as_f64),
        ) {
            pairs.push((e, g));
        }
    }
    if let (Some(Value::Array(e)), Some(Value::Array(g))) =
        (expect.get("chunk_gaps_s"), out.get("chunk_gaps_s"))
    {
        pairs.extend(
            e.iter()
                .zip(g)
                .filter_map(|(e, g)| Some((e.as_f64()?, g.as_f64()?))),
        );
    }
    pairs
        .into_iter()
        .map(|(e, g)| g - e)
        .max_by(|a, b| a.abs().total_cmp(&b.abs()))
}

/// `exp` null: `got` must be null. Otherwise both numbers within `tol`.
fn check_number(exp: &Value, got: &Value, tol: f64) -> Option<String> {
    match (exp.as_f64(), got.as_f64()) {
        (None, None) if exp.is_null() && got.is_null() => None,
        (Some(e), Some(g)) if (e - g).abs() <= tol + 1e-12 => None,
        (Some(e), Some(g)) => Some(format!(
            "expected {e} ± {tol}, got {g} (off by {:+.4})",
            g - e
        )),
        _ => Some(format!("expected {exp}, got {got}")),
    }
}

/// decode TPS is compared as 1/decode against the expected TPOT (or 1/expected decode).
fn check_decode(exp: &Value, exp_tpot: Option<&Value>, got: &Value, tol: f64) -> Option<String> {
    let Some(exp_decode) = exp.as_f64() else {
        return (!got.is_null() || !exp.is_null()).then(|| format!("expected {exp}, got {got}"));
    };
    let want_tpot = exp_tpot.and_then(Value::as_f64).unwrap_or(1.0 / exp_decode);
    match got.as_f64() {
        Some(g) if g > 0.0 && (1.0 / g - want_tpot).abs() <= tol + 1e-12 => None,
        Some(g) => Some(format!(
            "expected {exp_decode} (1/x = {want_tpot} ± {tol}), got {g} (1/x = {})",
            1.0 / g
        )),
        None => Some(format!("expected {exp_decode}, got {got}")),
    }
}

fn check_gaps(exp: &Value, got: &Value, tol: f64) -> Option<String> {
    let empty = Vec::new();
    let exp_arr = match exp {
        Value::Null => &empty,
        Value::Array(a) => a,
        _ => return Some(format!("expect value {exp} is not an array")),
    };
    let Some(got_arr) = got.as_array() else {
        return Some(format!("expected {exp}, got {got}"));
    };
    let ok = exp_arr.len() == got_arr.len()
        && exp_arr
            .iter()
            .zip(got_arr)
            .all(|(e, g)| check_number(e, g, tol).is_none());
    (!ok).then(|| format!("expected {exp} (each ± {tol}), got {got}"))
}

fn check_flags(exp: &Value, got: &Value) -> Option<String> {
    let set = |v: &Value| -> Option<BTreeSet<String>> {
        if v.is_null() {
            return Some(BTreeSet::new());
        }
        v.as_array()?
            .iter()
            .map(|f| f.as_str().map(String::from))
            .collect()
    };
    match (set(exp), set(got)) {
        (Some(e), Some(g)) if e == g => None,
        _ => Some(format!("expected {exp} (as a set), got {got}")),
    }
}

fn tail(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

// ---------------------------------------------------------------------------------------------
// Tests of the case parser and the replay server themselves
// ---------------------------------------------------------------------------------------------

fn known_case(name: &str) -> Case {
    let path = default_cases_dir().join(format!("{name}.txt"));
    Case::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn secs(s: &str) -> Duration {
    parse_secs(s).unwrap_or_else(|| panic!("bad seconds {s:?}"))
}

#[test]
fn parse_secs_is_exact() {
    assert_eq!(parse_secs("0.045"), Some(Duration::from_millis(45)));
    assert_eq!(parse_secs("75.202"), Some(Duration::from_millis(75_202)));
    assert_eq!(parse_secs("2"), Some(Duration::from_secs(2)));
    assert_eq!(parse_secs("1.6"), Some(Duration::from_millis(1600)));
    assert_eq!(parse_secs("<s>"), None);
    assert_eq!(parse_secs(".5"), None);
    assert_eq!(parse_secs("-1"), None);
}

#[test]
fn case_18_splits_mid_line() {
    let case = known_case("18-event-split-across-tcp-reads");
    let times: Vec<Duration> = case.segments.iter().map(|s| s.at).collect();
    assert_eq!(
        times,
        ["0.050", "0.300", "0.340", "0.360", "0.400"].map(secs)
    );
    assert_eq!(case.end, End::Close(secs("0.401")));
    let seg = |i: usize| &case.segments[i].bytes;
    assert!(seg(1).starts_with(b"data: {"));
    assert!(
        seg(1).ends_with(b"\"content\":\"Hel"),
        "{:?}",
        String::from_utf8_lossy(seg(1))
    );
    assert_eq!(seg(2).as_slice(), b"lo\"},\"finish_reason\":null}]}\n");
    assert!(seg(3).starts_with(b"\ndata: {"));
    assert!(seg(4).ends_with(b"data: [DONE]\n\n"));
}

#[test]
fn case_01_is_a_byte_exact_http_response() {
    let case = known_case("01-role-only-first-chunk");
    let resp = case.response_bytes();
    assert!(resp.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert_eq!(case.segments.len(), 6);
    assert_eq!(case.segments[0].at, secs("0.045"));
    let head_len = case.head_len().expect("head");
    assert!(resp[..head_len].ends_with(b"Connection: close\r\n\r\n"));
    // the body keeps its LF line endings; the marker's own LF is not data
    assert!(resp[head_len..].starts_with(b"data: {\"id\":\"chatcmpl-001\""));
    assert!(resp.ends_with(b"data: [DONE]\n\n"));
    assert!(!resp.windows(2).any(|w| w == b"%%"));
    assert!(!case.is_gzip());
}

#[test]
fn case_22_last_segment_ends_with_a_single_lf() {
    let case = known_case("22-final-event-without-blank-line");
    let last = case.segments.last().expect("segments");
    assert_eq!(last.at, secs("0.230"));
    assert_eq!(case.end, End::Close(secs("0.230")));
    assert!(last.bytes.ends_with(b"}]}\n") && !last.bytes.ends_with(b"\n\n"));
}

#[test]
fn every_case_file_parses() {
    let dir = cases_dir();
    let files = expect_files(&dir).expect("list cases");
    assert!(!files.is_empty());
    for f in files {
        let name = case_name(&f);
        let case =
            Case::load(&f.with_file_name(format!("{name}.txt"))).unwrap_or_else(|e| panic!("{e}"));
        let resp = case.response_bytes();
        assert!(resp.starts_with(b"HTTP/1.1 "), "{name}: no status line");
        let head_len = case
            .head_len()
            .unwrap_or_else(|| panic!("{name}: no CRLFCRLF"));
        let head = &resp[..head_len];
        for (i, _) in head.iter().enumerate().filter(|(_, c)| **c == b'\n') {
            assert!(i > 0 && head[i - 1] == b'\r', "{name}: bare LF in the head");
        }
        assert!(
            case.segments.windows(2).all(|w| w[0].at <= w[1].at),
            "{name}: times go back"
        );
        assert!(case.last_instant() >= case.segments.last().map_or(Duration::ZERO, |s| s.at));
        // a Content-Length in a case must match its body
        let head_text = String::from_utf8_lossy(head).to_ascii_lowercase();
        if let Some(v) = head_text
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
        {
            let len: usize = v.trim().parse().expect("content-length");
            assert_eq!(len, resp.len() - head_len, "{name}: Content-Length vs body");
        }
        case.script().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn parser_keeps_non_marker_percent_signs_and_rejects_stray_bytes() {
    let file = b"# h\n#---- RAW ----\n%%SEG t=0.1s%%\nHTTP/1.1 200 OK\r\n\r\n100%% sure %%SEG t=x%%\n%%EOF t=0.2s%%\ntrailing";
    let case = Case::parse("x", file).expect("parse");
    assert_eq!(case.segments.len(), 1);
    assert_eq!(
        case.segments[0].bytes,
        b"HTTP/1.1 200 OK\r\n\r\n100%% sure %%SEG t=x%%\n"
    );
    assert_eq!(case.end, End::Close(secs("0.2")));
    assert!(Case::parse("x", b"#---- RAW ----\nstray%%SEG t=0.1s%%\nA%%EOF t=1s%%").is_err());
    let open = Case::parse("x", b"#---- RAW ----\n%%SEG t=0.1s%%\nA\r\n").expect("no end marker");
    assert_eq!(
        open.end,
        End::KeepOpen,
        "no end marker keeps the connection open"
    );
    assert_eq!(
        open.segments[0].bytes, b"A\r\n",
        "the bytes after the last marker are data"
    );
    let rst = Case::parse("x", b"#---- RAW ----\n%%SEG t=0.1s%%\nA%%RST t=0.3s%%\nB").expect("rst");
    assert_eq!(rst.end, End::Reset(secs("0.3")));
    assert_eq!(rst.segments[0].bytes, b"A");
    assert!(
        Case::parse("x", b"%%SEG t=0.1s%%\nA%%EOF t=1s%%").is_err(),
        "no RAW line"
    );
}

#[test]
fn gzip_case_script_is_head_then_one_member() {
    let case = known_case("29-gzip-compressed-sse-buffered");
    assert!(case.is_gzip());
    let script = case.script().expect("script");
    assert_eq!(script.writes.len(), 2);
    assert_eq!(script.writes[0].at, secs("0.300"));
    assert!(script.writes[0].bytes.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(
        script.writes[0]
            .bytes
            .ends_with(b"Connection: close\r\n\r\n")
    );
    assert_eq!(script.writes[1].at, secs("1.600"));
    assert_eq!(script.end, End::Close(secs("1.601")));
    let body: Vec<u8> = case.segments[1..]
        .iter()
        .flat_map(|s| s.bytes.clone())
        .collect();
    let gz = &script.writes[1].bytes;
    let mut rest: &[u8] = gz;
    let mut dec = flate2::bufread::GzDecoder::new(&mut rest);
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut dec, &mut plain).expect("gunzip");
    drop(dec);
    assert_eq!(plain, body);
    assert!(rest.is_empty(), "more than one gzip member");
    assert_eq!(gz, &gzip_one_member(&body).expect("gzip"));
}

/// Send one request to `addr` and record every read: (time since the request was sent, bytes).
async fn fetch(addr: SocketAddr, request: &[u8]) -> Vec<(Duration, Vec<u8>)> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request).await.expect("send");
    let t0 = Instant::now();
    let mut reads = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("server too slow")
            .expect("read");
        if n == 0 {
            return reads;
        }
        reads.push((t0.elapsed(), buf[..n].to_vec()));
    }
}

const POST: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"stream\": true}";

/// Each segment arrives in its own read, never early and not much late, byte-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_replays_case_18_on_time() {
    let case = known_case("18-event-split-across-tcp-reads");
    let (addr, server) = ReplayServer::start(&case).await.expect("start");
    let reads = fetch(addr, POST).await;
    let got: Vec<u8> = reads.iter().flat_map(|(_, b)| b.clone()).collect();
    assert_eq!(got, case.response_bytes());
    assert_eq!(reads.len(), case.segments.len(), "one read per segment");
    for ((at, bytes), seg) in reads.iter().zip(&case.segments) {
        assert_eq!(bytes, &seg.bytes);
        assert!(
            *at + Duration::from_millis(1) >= seg.at,
            "early: {at:?} < {:?}",
            seg.at
        );
        assert!(
            *at < seg.at + Duration::from_millis(100),
            "late: {at:?} vs {:?}",
            seg.at
        );
    }
    assert_eq!(server.requests_received(), 1);
    let req = &server.requests()[0];
    assert_eq!(req.target, "/v1/chat/completions");
    assert_eq!(req.header("ACCEPT-ENCODING"), Some("identity"));
    assert_eq!(req.body_json().expect("json")["stream"], Value::Bool(true));
    assert!(server.errors().is_empty());
}

/// The same script is served to every connection, and each request is counted; a chunked
/// request body is decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_serves_every_connection_and_counts() {
    let case = known_case("23-no-token-stream-counted-as-success");
    let (addr, server) = ReplayServer::start(&case).await.expect("start");
    let chunked = b"POST http://127.0.0.1:9/v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n";
    let (a, b) = tokio::join!(fetch(addr, POST), fetch(addr, chunked));
    for reads in [a, b] {
        let got: Vec<u8> = reads.into_iter().flat_map(|(_, b)| b).collect();
        assert_eq!(got, case.response_bytes());
    }
    assert_eq!(server.requests_received(), 2);
    assert_eq!(server.connections(), 2);
    let reqs = server.requests();
    let abs = reqs
        .iter()
        .find(|r| r.target.starts_with("http://"))
        .expect("absolute-form");
    assert_eq!(abs.body, b"{\"a\":1}");
}

/// gzip case: the head at 0.300 s, then the whole compressed body in one read at 1.600 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_replays_gzip_case_in_one_burst() {
    let case = known_case("29-gzip-compressed-sse-buffered");
    let (addr, _server) = ReplayServer::start(&case).await.expect("start");
    let reads = fetch(addr, POST).await;
    assert_eq!(reads.len(), 2, "head, then body");
    let script = case.script().expect("script");
    for ((at, bytes), w) in reads.iter().zip(&script.writes) {
        assert_eq!(bytes, &w.bytes);
        assert!(*at + Duration::from_millis(1) >= w.at && *at < w.at + Duration::from_millis(100));
    }
}

/// A sink answers nothing and closes; a request sent to it is still counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_counts_and_closes() {
    let (addr, sink) = ReplayServer::start_sink().await.expect("start");
    assert!(fetch(addr, POST).await.is_empty());
    assert_eq!(sink.requests_received(), 1);
}

/// Manual debugging aid: `TOKENPROBE_SERVE_CASE=18-event-split-across-tcp-reads cargo test --test
/// replay serve_one_case -- --ignored --nocapture` serves that case for 60 s (or
/// `TOKENPROBE_SERVE_SECS`) and prints its address, e.g. for `curl -N`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "manual: serves a case for curl"]
async fn serve_one_case() {
    let name = std::env::var("TOKENPROBE_SERVE_CASE").expect("set TOKENPROBE_SERVE_CASE");
    let secs: u64 = std::env::var("TOKENPROBE_SERVE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let case =
        Case::load(&cases_dir().join(format!("{name}.txt"))).unwrap_or_else(|e| panic!("{e}"));
    let (addr, server) = ReplayServer::start(&case).await.expect("start");
    println!("serving {name} on http://{addr}");
    tokio::time::sleep(Duration::from_secs(secs)).await;
    for r in server.requests() {
        println!("{}{}", r.head_text(), String::from_utf8_lossy(&r.body));
    }
}
