//! Shared helpers for the end-to-end tests (`tests/peers/real_server.rs`,
//! `tests/peers/prometheus_e2e.rs`, `tests/peers/dashboard_queries.rs`, `tests/e2e/bench.rs`,
//! `tests/e2e/simulate_models.rs`) and,
//! through `tests/common/faults.rs`, the fault tests (`tests/peers/llmock.rs`,
//! `tests/peers/guidellm.rs`) and `tests/peers/deploy_checks.rs`: child processes that die
//! with the test, a llama.cpp server with a tiny model, `tokenprobe serve` and
//! `tokenprobe simulate`, a minimal HTTP/1.1 client with timeouts, and a
//! Prometheus text-format reader.
//!
//! What these tests need is installed by `scripts/ci/install-test-deps.sh`; a
//! missing piece fails the test with that hint. `TOKENPROBE_SKIP_E2E=1` skips
//! them on a developer machine, never under CI (`CI` set).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::{c_int, c_ulong};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

pub const INSTALL_HINT: &str = "run scripts/ci/install-test-deps.sh (then scripts/test.sh)";

/// The prompt the e2e tests probe with: SmolLM2-135M answers it with a long
/// story, so a 32-token budget ends by `length` and (nearly) every generated
/// token arrives as its own content event.
pub const STORY_PROMPT: &str = "Write a long story about a dragon.";

// ------------------------------------------------------------------ setup

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn venv() -> PathBuf {
    match std::env::var_os("TOKENPROBE_VENV") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => repo_root().join(".venv"),
    }
}

pub fn venv_python() -> PathBuf {
    venv().join("bin").join("python")
}

pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Find an executable on PATH (or at an absolute path).
pub fn which(name: &str) -> Option<PathBuf> {
    let p = Path::new(name);
    if p.is_absolute() {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|d| d.join(name))
        .find(|c| c.is_file())
}

/// Checks that the venv and the named tools exist. Returns false (the test
/// should return early) only when `TOKENPROBE_SKIP_E2E=1` outside CI;
/// otherwise a missing dependency panics with the install hint.
pub fn require_deps(test: &str, tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    if !venv_python().is_file() {
        missing.push(format!("Python venv {}", venv().display()));
    }
    for t in tools {
        if which(t).is_none() {
            missing.push(format!("`{t}` on PATH"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!("{test}: missing {}: {INSTALL_HINT}", missing.join(", "));
    if !in_ci() && std::env::var("TOKENPROBE_SKIP_E2E").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED (TOKENPROBE_SKIP_E2E=1): {msg}");
        return false;
    }
    panic!("{msg}");
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Held while an e2e test runs; see [`serial`].
pub struct Serial {
    _file: File,
    _guard: MutexGuard<'static, ()>,
}

/// The e2e tests time things on a 2-core machine: run them one at a time,
/// across threads (cargo test) and across processes (cargo nextest), with an
/// exclusive lock on a file in the target directory.
pub fn serial() -> Serial {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tokenprobe-e2e.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    Serial {
        _file: file,
        _guard: guard,
    }
}

/// Ends the whole test process if a test runs longer than `limit` (a hung
/// read, a child that never answers). Children die with it (PDEATHSIG).
pub struct Watchdog {
    _tx: mpsc::Sender<()>,
}

impl Watchdog {
    pub fn new(test: &'static str, limit: Duration) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                eprintln!("\n{test}: HARD TIMEOUT after {limit:?}; aborting the test process");
                std::process::exit(124);
            }
        });
        Watchdog { _tx: tx }
    }
}

// ------------------------------------------------------------------ children

unsafe extern "C" {
    fn prctl(option: c_int, ...) -> c_int;
}

const PR_SET_PDEATHSIG: c_int = 1;
pub const SIGTERM: c_ulong = 15;
pub const SIGKILL: c_ulong = 9;

/// A child process that is killed and reaped when dropped (also on panic), and
/// gets SIGTERM from the kernel if the test thread that started it dies.
/// Its stdout/stderr go to files, shown by [`ChildGuard::logs`].
pub struct ChildGuard {
    pub name: String,
    child: Child,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
}

impl ChildGuard {
    /// Spawns `cmd`; it gets SIGTERM if the starting thread dies.
    pub fn spawn(name: &str, cmd: Command, dir: &Path) -> ChildGuard {
        ChildGuard::spawn_with_deathsig(name, cmd, dir, SIGTERM)
    }

    /// Spawns `cmd`; it gets `deathsig` (e.g. [`SIGKILL`]) if the starting thread dies.
    pub fn spawn_with_deathsig(
        name: &str,
        mut cmd: Command,
        dir: &Path,
        deathsig: c_ulong,
    ) -> ChildGuard {
        let stdout_path = dir.join(format!("{name}.stdout"));
        let stderr_path = dir.join(format!("{name}.stderr"));
        cmd.stdin(Stdio::null())
            .stdout(File::create(&stdout_path).expect("create stdout log"))
            .stderr(File::create(&stderr_path).expect("create stderr log"));
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                prctl(PR_SET_PDEATHSIG, deathsig);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({cmd:?}): {e}"));
        ChildGuard {
            name: name.to_string(),
            child,
            stdout_path,
            stderr_path,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Some(status) once the child has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The tail of both output files, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "--- {} stdout (tail) ---\n{}\n--- {} stderr (tail) ---\n{}",
            self.name,
            tail(&self.stdout(), 40),
            self.name,
            tail(&self.stderr(), 40)
        )
    }

    /// Panics with the logs if the child has exited.
    pub fn assert_running(&mut self) {
        if let Some(st) = self.exited() {
            panic!("{} exited unexpectedly ({st})\n{}", self.name, self.logs());
        }
    }

    /// The address of the `listening on ADDR` line a server prints on stdout, waited for up to
    /// `limit` while the server runs (`what` names the wait).
    pub fn listening(&mut self, what: &str, limit: Duration) -> String {
        wait_for(what, limit, || {
            self.assert_running();
            self.stdout()
                .lines()
                .find_map(|l| l.strip_prefix("listening on ").map(str::to_owned))
        })
    }

    /// Sends `sig` (e.g. "-STOP").
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig} {} failed", self.name);
    }

    /// Sends `sig` (e.g. "-TERM") and waits up to `limit` for the exit.
    /// Returns the exit status and how long it took, or None on time-out.
    pub fn signal_and_wait(
        &mut self,
        sig: &str,
        limit: Duration,
    ) -> Option<(ExitStatus, Duration)> {
        self.signal(sig);
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(st) = self.exited() {
                return Some((st, start.elapsed()));
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Runs a command to completion with a deadline; returns (status, stdout, stderr).
pub fn run_with_timeout(
    mut cmd: Command,
    stdin: Option<&[u8]>,
    limit: Duration,
) -> (ExitStatus, String, String) {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    unsafe {
        cmd.pre_exec(|| {
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            Ok(())
        });
    }
    let desc = format!("{cmd:?}");
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    let input = stdin.map(|b| b.to_vec());
    let mut child_in = child.stdin.take();
    let writer = thread::spawn(move || {
        if let (Some(mut w), Some(b)) = (child_in.take(), input) {
            let _ = w.write_all(&b);
        }
    });
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{desc} did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    (status, out_t.join().unwrap(), err_t.join().unwrap())
}

/// A request of the simulator's event log as (arrival, last event written), Unix seconds; `None`
/// for a record without both (a request answered without events). On the wire's clock where the
/// kernel stamped both ends (the request's last bytes arriving, the last event leaving: the
/// client cannot send its next request before that), else on the simulator's own: there a
/// worker's next request can be read before the write that answered its last one has returned.
pub fn record_span(r: &serde_json::Value) -> Option<(f64, f64)> {
    let last = r["events"].as_array()?.last()?;
    if let (Some(arrival), Some(left)) =
        (r["arrival_kernel_unix_ns"].as_f64(), last["tx_s"].as_f64())
    {
        return Some((arrival / 1e9, arrival / 1e9 + left));
    }
    let arrival = r["arrival_unix_ns"].as_f64()? / 1e9;
    Some((arrival, arrival + last["t_s"].as_f64()?))
}

/// A loopback port free now, for a process a test starts later. It is taken below the kernel's
/// ephemeral range (`ip_local_port_range`): a port bound with 0 comes from that range, where
/// every outgoing connection of the other tests picks its local port, so one could take it
/// between this check and its use (a demo test once found its llama.cpp port "in use by another
/// process"). Each call of the process starts from another port, so two tests running at once
/// do not check the same ones in turn.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32_768);
    let (base, span) = (10_000u64, low.saturating_sub(10_000));
    if span > 1_000 {
        let start = u64::from(std::process::id()).wrapping_mul(7_919);
        for _ in 0..2_000 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = base + (start + n * 101) % span;
            if let Ok(port) = u16::try_from(port)
                && TcpListener::bind(("127.0.0.1", port)).is_ok()
            {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// Polls `f` every 100 ms until it returns Some or `limit` passes.
pub fn wait_for<T>(what: &str, limit: Duration, f: impl FnMut() -> Option<T>) -> T {
    poll_for(what, limit, Duration::from_millis(100), f)
}

/// Polls `f` every `every` until it returns Some or `limit` passes.
pub fn poll_for<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        thread::sleep(every);
    }
}

// ------------------------------------------------------------------ llama.cpp

/// llama.cpp's server (xllamacpp) with SmolLM2-135M, started by
/// `scripts/llama/llama-server.py` on a free loopback port.
pub struct LlamaServer {
    pub guard: ChildGuard,
    /// e.g. `http://127.0.0.1:41234` (OpenAI API under `/v1`)
    pub url: String,
}

impl LlamaServer {
    pub fn start(dir: &Path) -> LlamaServer {
        Self::start_with(dir, &[])
    }

    /// With more arguments for `llama-server.py` (e.g. `--parallel 2`).
    pub fn start_with(dir: &Path, args: &[&str]) -> LlamaServer {
        let script = repo_root().join("scripts/llama/llama-server.py");
        let mut cmd = Command::new(venv_python());
        cmd.arg(&script)
            .args(["--port", "0", "--threads", "1", "--die-with-parent"])
            .args(args);
        let mut guard = ChildGuard::spawn("llama-server", cmd, dir);
        let url = wait_for(
            "llama-server to print LLAMA_SERVER_URL",
            Duration::from_secs(90),
            || {
                guard.assert_running();
                guard
                    .stdout()
                    .lines()
                    .find_map(|l| l.strip_prefix("LLAMA_SERVER_URL=").map(str::to_string))
            },
        );
        eprintln!("llama-server up at {url} (pid {})", guard.id());
        LlamaServer { guard, url }
    }

    pub fn base_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    pub fn metrics(&self) -> Samples {
        let r = http_get(&format!("{}/metrics", self.url), &[]);
        assert_eq!(r.status, 200, "llama-server /metrics: {}", r.body);
        Samples::parse(&r.body)
    }

    /// One non-streaming chat request; returns the response JSON.
    pub fn chat(&self, prompt: &str, max_tokens: u32) -> serde_json::Value {
        let body = serde_json::json!({
            "model": "smollm2",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
        });
        let r = http_request(
            "POST",
            &format!("{}/v1/chat/completions", self.url),
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "llama-server chat: {}", r.body);
        serde_json::from_str(&r.body).expect("chat response JSON")
    }
}

// ------------------------------------------------------------------ tokenprobe

/// The binary under test; `TOKENPROBE_BIN` overrides it (to test another build).
pub use super::tokenprobe_bin;

/// Every histogram family a job can export (`histograms:`), so a test sees each.
pub const ALL_HISTOGRAMS: &str = "[time_to_first_token, time_to_first_output_token, time_per_output_token, inter_chunk_latency, decode_tokens_per_second, request_duration, time_to_headers, failed_probe_duration, connection_phase, conversation_time_to_first_token, cold_start_time_to_first_token]";

/// A config with one target (the llama server) probing every `interval`, exporting every
/// histogram family.
pub fn config_yaml(base_url: &str, interval: &str, max_tokens: u32) -> String {
    format!(
        r#"defaults:
  interval: {interval}
  timeouts: {{connect: 5s, first_token: 30s, idle: 30s, total: 120s}}
  histograms: {ALL_HISTOGRAMS}
prompts:
  - name: story
    messages: [{{role: user, content: "{STORY_PROMPT}"}}]
    max_tokens: {max_tokens}
targets:
  - name: local
    base_url: {base_url}
    api: openai-chat
    models: [smollm2]
    prompts: [story]
"#
    )
}

/// `tokenprobe serve` on a free loopback port, with debug JSON logs.
pub struct Tokenprobe {
    pub guard: ChildGuard,
    /// e.g. `http://127.0.0.1:41235`
    pub url: String,
    pub config_path: PathBuf,
}

impl Tokenprobe {
    pub fn serve(dir: &Path, config: &str) -> Tokenprobe {
        Self::serve_with_env(dir, config, &[])
    }

    /// [`Tokenprobe::serve`] with these environment variables set.
    pub fn serve_with_env(dir: &Path, config: &str, env: &[(&str, &str)]) -> Tokenprobe {
        let config_path = dir.join("tokenprobe.yml");
        std::fs::write(&config_path, config).expect("write config");
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(tokenprobe_bin());
        cmd.arg("serve")
            .arg("--config.file")
            .arg(&config_path)
            .args(["--web.listen-address", &addr])
            .args(["--log.level", "debug", "--log.format", "json"])
            .envs(env.iter().copied());
        let mut guard = ChildGuard::spawn("tokenprobe", cmd, dir);
        let url = format!("http://{addr}");
        wait_for("tokenprobe /-/ready", Duration::from_secs(30), || {
            guard.assert_running();
            try_http_get(&format!("{url}/-/ready"), &[])
                .ok()
                .filter(|r| r.status == 200)
        });
        eprintln!("tokenprobe serve up at {url} (pid {})", guard.id());
        Tokenprobe {
            guard,
            url,
            config_path,
        }
    }

    pub fn metrics(&mut self) -> Samples {
        tokenprobe_metrics(&mut self.guard, &self.url)
    }

    /// Waits until `tokenprobe_probes_total` (summed) reaches `n`.
    pub fn wait_probes(&mut self, n: f64, limit: Duration) -> Samples {
        let deadline = Instant::now() + limit;
        loop {
            let m = self.metrics();
            let last = m.sum("tokenprobe_probes_total", &[]);
            if last >= n {
                return m;
            }
            if Instant::now() > deadline {
                panic!(
                    "tokenprobe_probes_total reached only {last} (wanted {n}) within {limit:?}\n{}",
                    self.guard.logs()
                );
            }
            thread::sleep(Duration::from_millis(200));
        }
    }

    /// The per-probe JSON log lines (those with an `outcome` field), with the
    /// fields flattened (tracing's JSON format nests them under `fields`).
    pub fn probe_logs(&self) -> Vec<serde_json::Map<String, serde_json::Value>> {
        json_logs(&self.guard)
            .into_iter()
            .filter(|obj| obj.contains_key("outcome"))
            .collect()
    }
}

/// Scrapes the `/metrics` of a running `tokenprobe serve` at `url`.
pub fn tokenprobe_metrics(guard: &mut ChildGuard, url: &str) -> Samples {
    guard.assert_running();
    let r = http_get(&format!("{url}/metrics"), &[]);
    assert_eq!(r.status, 200, "tokenprobe /metrics: {}", r.body);
    Samples::parse(&r.body)
}

/// The JSON log lines of a child (stderr, then stdout), with the fields
/// flattened (tracing's JSON format nests them under `fields`).
pub fn json_logs(guard: &ChildGuard) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let mut out = Vec::new();
    for line in guard.stderr().lines().chain(guard.stdout().lines()) {
        let Ok(serde_json::Value::Object(mut obj)) = serde_json::from_str(line) else {
            continue;
        };
        if let Some(serde_json::Value::Object(fields)) = obj.remove("fields") {
            for (k, v) in fields {
                obj.entry(k).or_insert(v);
            }
        }
        out.push(obj);
    }
    out
}

// ------------------------------------------------------------------ HTTP

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub fn http_get(url: &str, headers: &[(&str, &str)]) -> Response {
    http_request("GET", url, headers, b"")
}

pub fn try_http_get(url: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    try_http_request("GET", url, headers, b"")
}

/// The default per-step timeout of [`try_http_request`].
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

pub fn http_request(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    http_request_within(method, url, headers, body, HTTP_TIMEOUT)
}

/// [`http_request`] with every step bounded by `timeout`.
pub fn http_request_within(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> Response {
    try_http_request_within(method, url, headers, body, timeout)
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"))
}

/// A minimal HTTP/1.1 client (Connection: close, identity or chunked body),
/// every step bounded by a 30 s timeout.
pub fn try_http_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    try_http_request_within(method, url, headers, body, HTTP_TIMEOUT)
}

/// [`try_http_request`] with every step bounded by `timeout`.
pub fn try_http_request_within(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> std::io::Result<Response> {
    use std::io::{Error, ErrorKind};
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "only http:// URLs"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\nAccept-Encoding: identity\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method != "GET" || !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut payload = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidData,
                format!("bad status line {status_line:?}"),
            )
        })?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    });
    if chunked {
        payload = dechunk(&payload)?;
    }
    Ok(Response {
        status,
        headers,
        body: String::from_utf8(payload)
            .map_err(|e| Error::new(ErrorKind::InvalidData, format!("body is not UTF-8: {e}")))?,
    })
}

fn dechunk(mut data: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    let bad = |m: &str| Error::new(ErrorKind::InvalidData, format!("bad chunked body: {m}"));
    let mut out = Vec::new();
    loop {
        let eol = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("no chunk size line"))?;
        let size_str = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_str.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad("chunk size"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err(bad("short chunk"));
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Percent-encodes a query parameter value.
pub fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

// ------------------------------------------------------------------ exposition

/// One sample of an exposition, as the crate's own parser reads it.
pub type Sample = tokenprobe::servermetrics::expo::Reading;

/// The samples of a Prometheus text (0.0.4) or OpenMetrics exposition, read by the crate's own
/// strict parser (`servermetrics::expo`): a line it refuses fails the test.
#[derive(Debug, Clone, Default)]
pub struct Samples(pub Vec<Sample>);

impl Samples {
    pub fn parse(text: &str) -> Samples {
        use tokenprobe::servermetrics::expo::{ParseError, parse};
        match parse(text) {
            Ok(v) => Samples(v),
            Err(ParseError::Empty) => Samples::default(),
            Err(e) => panic!("not an exposition: {e}\n{text}"),
        }
    }

    /// Samples named `name` whose labels include every `(k, v)` of `want`.
    pub fn select<'a>(
        &'a self,
        name: &'a str,
        want: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.0
            .iter()
            .filter(move |s| s.name == name && want.iter().all(|(k, v)| s.label(k) == Some(*v)))
    }

    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.select(name, want).map(|s| s.value).sum()
    }

    pub fn count(&self, name: &str) -> usize {
        self.select(name, &[]).count()
    }

    /// The value of a single unlabelled (or only) series; panics if absent.
    pub fn one(&self, name: &str) -> f64 {
        let v: Vec<&Sample> = self.select(name, &[]).collect();
        assert!(!v.is_empty(), "metric {name} is absent");
        v.iter().map(|s| s.value).sum()
    }

    /// Whether a sample of `name` with all of `want` exists.
    pub fn has(&self, name: &str, want: &[(&str, &str)]) -> bool {
        self.select(name, want).next().is_some()
    }

    /// The value of the one series written `series` (`name{k="v",...}`, labels in the order
    /// written), if present.
    pub fn series(&self, series: &str) -> Option<f64> {
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.strip_suffix('}').unwrap_or(rest)),
            None => (series, ""),
        };
        let want: Vec<(String, String)> = labels
            .split("\",")
            .filter(|kv| !kv.is_empty())
            .filter_map(|kv| {
                let (k, v) = kv.split_once("=\"")?;
                Some((k.to_owned(), v.trim_end_matches('"').to_owned()))
            })
            .collect();
        self.0
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// Cumulative histogram buckets `(le, count)` of `name`, summed over
    /// the series that match `want`, in ascending `le` order.
    pub fn buckets(&self, name: &str, want: &[(&str, &str)]) -> Vec<(f64, f64)> {
        let mut by_le: BTreeMap<String, f64> = BTreeMap::new();
        let bucket = format!("{name}_bucket");
        for s in self.select(&bucket, want) {
            if let Some(le) = s.label("le") {
                *by_le.entry(le.to_owned()).or_default() += s.value;
            }
        }
        let mut out: Vec<(f64, f64)> = by_le
            .into_iter()
            .map(|(le, c)| {
                let x = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::NAN)
                };
                (x, c)
            })
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }
}

// ------------------------------------------------------------------ JSON

/// The first value under `key` anywhere in `v` (depth-first).
pub fn find_key<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m
            .get(key)
            .or_else(|| m.values().find_map(|x| find_key(x, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

pub fn f64_field(m: &serde_json::Map<String, serde_json::Value>, key: &str) -> Option<f64> {
    m.get(key).and_then(|v| match v {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    })
}

pub fn str_field<'a>(
    m: &'a serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Option<&'a str> {
    m.get(key).and_then(|v| v.as_str())
}

pub fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "median of nothing");
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Every `error_type` of docs/measurement.md, in its order.
pub const ERROR_TYPES: [&str; 18] = [
    "proxy",
    "connect",
    "tls",
    "timeout_connect",
    "timeout_first_token",
    "timeout_idle",
    "timeout_total",
    "auth",
    "quota_exceeded",
    "rate_limited",
    "overloaded",
    "bad_request",
    "server_error",
    "truncated",
    "empty_response",
    "malformed",
    "model_mismatch",
    "validation_failed",
];

/// Starts a real Prometheus on a free loopback port scraping `target` (host:port) every second,
/// with these rule files loaded, storing into `dir/tsdb`; waits until `/-/ready`. Returns the
/// guard and its base URL.
pub fn start_prometheus(dir: &Path, target: &str, rule_files: &[&Path]) -> (ChildGuard, String) {
    start_prometheus_scraping(dir, &[target], rule_files)
}

/// [`start_prometheus`] scraping several targets (host:port each) in one scrape job.
pub fn start_prometheus_scraping(
    dir: &Path,
    targets: &[&str],
    rule_files: &[&Path],
) -> (ChildGuard, String) {
    let targets = targets
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    start_prometheus_config(
        dir,
        &format!("  - job_name: tokenprobe\n    static_configs:\n      - targets: [{targets}]\n"),
        rule_files,
    )
}

/// A real Prometheus with these `scrape_configs` entries (YAML, indented as list items), every
/// second, and these rule files, accepting remote writes; its guard and base URL once `/-/ready`.
pub fn start_prometheus_config(
    dir: &Path,
    scrape_configs: &str,
    rule_files: &[&Path],
) -> (ChildGuard, String) {
    start_prometheus_with(dir, scrape_configs, rule_files, &[])
}

/// [`start_prometheus_config`] with extra command-line flags (e.g.
/// `--enable-feature=native-histograms`).
pub fn start_prometheus_with(
    dir: &Path,
    scrape_configs: &str,
    rule_files: &[&Path],
    flags: &[&str],
) -> (ChildGuard, String) {
    let mut rules = String::new();
    if !rule_files.is_empty() {
        rules.push_str("rule_files:\n");
        for f in rule_files {
            rules.push_str(&format!("  - '{}'\n", f.display()));
        }
    }
    let prom_config = dir.join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n{rules}\
             scrape_configs:\n{scrape_configs}"
        ),
    )
    .expect("write prometheus.yml");
    let prom_addr = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(
        which("prometheus").expect("prometheus on PATH (scripts/ci/install-test-deps.sh)"),
    );
    cmd.arg(format!("--config.file={}", prom_config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={prom_addr}"))
        // `bench --remote-write` writes to it (POST /api/v1/write).
        .arg("--web.enable-remote-write-receiver")
        .arg("--log.level=warn")
        .args(flags);
    let mut guard = ChildGuard::spawn("prometheus", cmd, dir);
    let prom = format!("http://{prom_addr}");
    wait_for("prometheus /-/ready", Duration::from_secs(60), || {
        guard.assert_running();
        try_http_get(&format!("{prom}/-/ready"), &[])
            .ok()
            .filter(|r| r.status == 200)
    });
    (guard, prom)
}

// ------------------------------------------------------------------ simulate

/// `tokenprobe simulate --seed 1` on a free loopback port with `args`; returns its guard and
/// `http://ADDR`.
pub fn start_simulate(dir: &Path, args: &[&str]) -> (ChildGuard, String) {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.args(["simulate", "--listen", "127.0.0.1:0", "--seed", "1"])
        .args(args);
    let mut guard = ChildGuard::spawn("simulate", cmd, dir);
    let url = guard.listening("simulate to print its address", Duration::from_secs(20));
    (guard, url)
}

/// The result of an instant PromQL query `q` against the Prometheus at `prom` (asserting the
/// query succeeded).
pub fn prom_query(prom: &str, q: &str) -> Vec<serde_json::Value> {
    let r = http_get(&format!("{prom}/api/v1/query?query={}", urlencode(q)), &[]);
    assert_eq!(r.status, 200, "query {q}: {}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("query JSON");
    assert_eq!(v["status"], "success", "query {q}: {v}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}
