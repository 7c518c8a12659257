//! Shared helpers of `tests/llmock.rs` and `tests/guidellm.rs`: third-party mock
//! servers from the project venv (`llmock serve`, `guidellm mock-server`),
//! `tokenprobe probe` / `tokenprobe serve` as child processes, a minimal blocking
//! HTTP/1.1 client, and a Prometheus text-format reader.
//!
//! What these tests need is installed by `scripts/install-fault-deps.sh`. A missing
//! piece FAILS the test with that hint: these tests never skip.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_ulong};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

pub const INSTALL_HINT: &str =
    "run scripts/install-fault-deps.sh (scripts/install-test-deps.sh runs it)";

// ------------------------------------------------------------------ setup

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The project venv: `$TOKENPROBE_VENV`, default `<repo>/.venv`.
pub fn venv() -> PathBuf {
    match std::env::var_os("TOKENPROBE_VENV") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => repo_root().join(".venv"),
    }
}

/// `<venv>/bin/<name>`; panics with the install hint when it is missing.
pub fn venv_tool(test: &str, name: &str) -> PathBuf {
    let p = venv().join("bin").join(name);
    if !p.is_file() {
        panic!(
            "{test}: missing {} (the Python package providing `{name}` is not installed in \
             the venv {}): {INSTALL_HINT}",
            p.display(),
            venv().display()
        );
    }
    p
}

/// The binary under test; `TOKENPROBE_BIN` overrides it.
pub fn tokenprobe_bin() -> PathBuf {
    match std::env::var_os("TOKENPROBE_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_tokenprobe")),
    }
}

/// Ends the whole test process if a test runs longer than `limit`; children
/// die with it (PDEATHSIG).
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

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// Polls `f` every 50 ms until it returns Some or `limit` passes.
pub fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(50));
    }
}

pub fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

// ------------------------------------------------------------------ children

unsafe extern "C" {
    fn prctl(option: c_int, ...) -> c_int;
}

const PR_SET_PDEATHSIG: c_int = 1;
const SIGKILL: c_ulong = 9;

fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            Ok(())
        });
    }
}

/// A child process killed and reaped on drop (also on panic), killed by the
/// kernel if the test thread that started it dies. Output goes to files.
pub struct Proc {
    pub name: String,
    child: Child,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command, dir: &Path) -> Proc {
        let stdout_path = dir.join(format!("{name}.stdout"));
        let stderr_path = dir.join(format!("{name}.stderr"));
        cmd.stdin(Stdio::null())
            .stdout(File::create(&stdout_path).expect("create stdout log"))
            .stderr(File::create(&stderr_path).expect("create stderr log"));
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({cmd:?}): {e}"));
        Proc {
            name: name.to_string(),
            child,
            stdout_path,
            stderr_path,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn logs(&self) -> String {
        format!(
            "--- {} stdout (tail) ---\n{}\n--- {} stderr (tail) ---\n{}",
            self.name,
            tail(&self.stdout(), 30),
            self.name,
            tail(&self.stderr(), 30)
        )
    }

    pub fn assert_running(&mut self) {
        if let Some(st) = self.exited() {
            panic!("{} exited unexpectedly ({st})\n{}", self.name, self.logs());
        }
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

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a command to completion with a deadline; returns (status, stdout, stderr).
pub fn run_with_timeout(mut cmd: Command, limit: Duration) -> (ExitStatus, String, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut cmd);
    let desc = format!("{cmd:?}");
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {desc}: {e}"));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
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
        thread::sleep(Duration::from_millis(10));
    };
    (
        status,
        out_t.join().expect("stdout reader"),
        err_t.join().expect("stderr reader"),
    )
}

// ------------------------------------------------------------------ llmock

/// `llmock serve` on an ephemeral port (uvicorn binds port 0 and logs the real one).
pub struct Llmock {
    pub proc: Proc,
    pub port: u16,
    /// `http://127.0.0.1:PORT`
    pub url: String,
}

impl Llmock {
    pub fn start(test: &str, dir: &Path, extra: &[&str]) -> Llmock {
        let bin = venv_tool(test, "llmock");
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--host", "127.0.0.1", "--port", "0"])
            .args(["--log-level", "warning", "--tool-mode", "off"])
            .args(extra)
            // No colours or box drawing in the logs.
            .env("NO_COLOR", "1")
            .env("TERM", "dumb");
        let mut proc = Proc::spawn("llmock", cmd, dir);
        // With --log-level warning uvicorn does not print its address; ask the
        // kernel instead: the one listening socket of that pid.
        let pid = proc.id();
        let port = wait_for("llmock to listen", Duration::from_secs(30), || {
            proc.assert_running();
            listening_ports(pid).into_iter().next()
        });
        let url = format!("http://127.0.0.1:{port}");
        wait_for("llmock /health", Duration::from_secs(10), || {
            try_http("GET", &format!("{url}/health"), &[], b"")
                .ok()
                .filter(|r| r.status == 200)
        });
        Llmock { proc, port, url }
    }

    /// Queues behaviours (`POST /_llmock/scenario`).
    pub fn scenario(&self, behaviors: serde_json::Value) {
        let body = serde_json::json!({ "behaviors": behaviors }).to_string();
        let r = http(
            "POST",
            &format!("{}/_llmock/scenario", self.url),
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 201, "llmock scenario rejected: {}", r.body);
    }

    /// llmock's own journal (`GET /_llmock/requests`).
    pub fn requests(&self) -> Vec<serde_json::Value> {
        let r = http("GET", &format!("{}/_llmock/requests", self.url), &[], b"");
        assert_eq!(r.status, 200, "llmock requests: {}", r.body);
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("journal JSON");
        v["requests"].as_array().cloned().unwrap_or_default()
    }
}

/// TCP ports a process listens on (from /proc/<pid>/fd and /proc/net/tcp).
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes = socket_inodes(pid);
    tcp_table()
        .into_iter()
        .filter(|e| e.state == 0x0A && inodes.contains(&e.inode))
        .map(|e| e.local_port)
        .collect()
}

fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    rd.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let s = l.to_string_lossy().to_string();
            s.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct TcpEntry {
    pub local_port: u16,
    pub remote_port: u16,
    /// Kernel TCP state: 0x01 ESTABLISHED, 0x0A LISTEN, ...
    pub state: u8,
    pub inode: u64,
}

/// The IPv4 TCP sockets of this network namespace (`/proc/net/tcp`).
pub fn tcp_table() -> Vec<TcpEntry> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let port = |addr: &str| {
        addr.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(TcpEntry {
                local_port: port(f.get(1)?)?,
                remote_port: port(f.get(2)?)?,
                state: u8::from_str_radix(f.get(3)?, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// ESTABLISHED connections of process `pid` to local port `port`.
pub fn established_to(pid: u32, port: u16) -> usize {
    let inodes = socket_inodes(pid);
    tcp_table()
        .into_iter()
        .filter(|e| e.state == 0x01 && e.remote_port == port && inodes.contains(&e.inode))
        .count()
}

// ------------------------------------------------------------------ guidellm

/// `guidellm mock-server` timing settings.
#[derive(Debug, Clone, Copy)]
pub struct MockTiming {
    pub ttft_ms: f64,
    pub itl_ms: f64,
    pub output_tokens: u32,
}

/// Runs `guidellm mock-server` (the same click command as the `guidellm` script)
/// with Python's garbage collector frozen after the imports. The stock command
/// imports sanic, transformers and numpy: ~1M long-lived objects that every full
/// (generation 2) collection walks, which stalls the mock's event loop for
/// 70-160 ms every few seconds at 100 concurrent streams (measured with
/// `gc.callbacks`). Such a pause delays every token in flight and would be blamed on
/// tokenprobe. `gc.freeze()` moves the imported objects out of the collector's
/// reach; what the mock allocates per request is still collected.
pub const GUIDELLM_MOCK_LAUNCHER: &str = "\
import gc, sys
import guidellm.mock_server  # sanic, transformers, numpy: the heavy imports
from guidellm.__main__ import cli
gc.collect()
gc.freeze()
sys.argv[0] = 'guidellm'
cli()
";

/// `guidellm mock-server` on a free port (Sanic takes `--port 0` as "default
/// 8000", so the port is picked here; a lost race is retried).
pub struct GuidellmMock {
    pub proc: Proc,
    pub port: u16,
    pub url: String,
}

impl GuidellmMock {
    pub fn start(test: &str, dir: &Path, t: MockTiming) -> GuidellmMock {
        // The console script proves the package is installed; the launcher runs
        // its CLI with the venv's interpreter.
        venv_tool(test, "guidellm");
        let python = venv_tool(test, "python");
        let mut last = String::new();
        for attempt in 0..3 {
            let port = free_port();
            let mut cmd = Command::new(&python);
            cmd.args(["-c", GUIDELLM_MOCK_LAUNCHER])
                .args(["mock-server", "--host", "127.0.0.1", "--port"])
                .arg(port.to_string())
                .args(["--ttft-ms", &t.ttft_ms.to_string()])
                .args(["--itl-ms", &t.itl_ms.to_string()])
                .args(["--output-tokens", &t.output_tokens.to_string()])
                .env("NO_COLOR", "1")
                .env("TERM", "dumb");
            let mut proc = Proc::spawn(&format!("guidellm-{attempt}"), cmd, dir);
            let url = format!("http://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if proc.exited().is_some() {
                    break;
                }
                if try_http("GET", &format!("{url}/health"), &[], b"")
                    .is_ok_and(|r| r.status == 200 && r.body.contains("healthy"))
                {
                    // The pid must be the one listening (not some other server).
                    if listening_ports(proc.id()).contains(&port) {
                        return GuidellmMock { proc, port, url };
                    }
                }
                thread::sleep(Duration::from_millis(100));
            }
            last = proc.logs();
        }
        panic!("{test}: guidellm mock-server did not start\n{last}");
    }

    /// One streaming request, so one-time costs (imports, Faker's first
    /// instance) are paid before anything is measured.
    pub fn warm_up(&self) {
        let body = serde_json::json!({
            "model": "warm-up",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": true,
            "max_tokens": 2,
        })
        .to_string();
        let r = http(
            "POST",
            &format!("{}/v1/chat/completions", self.url),
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "guidellm warm-up: {}", r.body);
        assert!(r.body.contains("[DONE]"), "guidellm warm-up: {}", r.body);
    }
}

// ------------------------------------------------------------------ tokenprobe

/// `tokenprobe probe ... --format json`: exit code and the parsed report.
pub fn probe_json(args: &[String], limit: Duration) -> (i32, serde_json::Value, String) {
    let mut cmd = Command::new(tokenprobe_bin());
    cmd.arg("probe").args(args).args(["--format", "json"]);
    let (st, out, err) = run_with_timeout(cmd, limit);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| {
        panic!("probe {args:?}: stdout is not one JSON object ({e}):\n{out}\nstderr:\n{err}")
    });
    (st.code().unwrap_or(-1), v, err)
}

/// `tokenprobe serve` on an ephemeral port; the address comes from its first
/// JSON log line (`address`).
pub struct Serve {
    pub proc: Proc,
    pub url: String,
}

impl Serve {
    pub fn start(dir: &Path, name: &str, config: &str, extra: &[&str]) -> Serve {
        let cfg = dir.join(format!("{name}.yml"));
        std::fs::write(&cfg, config).expect("write config");
        let mut cmd = Command::new(tokenprobe_bin());
        cmd.arg("serve")
            .arg("--config.file")
            .arg(&cfg)
            .args(["--web.listen-address", "127.0.0.1:0"])
            .args(["--log.format", "json"])
            .args(extra);
        let mut proc = Proc::spawn(name, cmd, dir);
        let addr = wait_for(
            "tokenprobe serve to log its address",
            Duration::from_secs(20),
            || {
                proc.assert_running();
                proc.stderr()
                    .lines()
                    .chain(proc.stdout().lines())
                    .find_map(|l| {
                        let v: serde_json::Value = serde_json::from_str(l).ok()?;
                        let a = v.get("address").or_else(|| v.pointer("/fields/address"))?;
                        a.as_str().map(str::to_string)
                    })
            },
        );
        Serve {
            proc,
            url: format!("http://{addr}"),
        }
    }

    pub fn metrics(&mut self) -> Samples {
        self.proc.assert_running();
        let r = http("GET", &format!("{}/metrics", self.url), &[], b"");
        assert_eq!(r.status, 200, "tokenprobe /metrics: {}", r.body);
        Samples::parse(&r.body)
    }

    /// JSON log lines with `fields` flattened into the top level.
    pub fn json_logs(&self) -> Vec<serde_json::Map<String, serde_json::Value>> {
        let mut out = Vec::new();
        for line in self.proc.stderr().lines().chain(self.proc.stdout().lines()) {
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
}

// ------------------------------------------------------------------ HTTP

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

pub fn http(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    try_http(method, url, headers, body).unwrap_or_else(|e| panic!("{method} {url}: {e}"))
}

/// A minimal HTTP/1.1 client (Connection: close; identity or chunked body);
/// every step bounded by a 20 s timeout.
pub fn try_http(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
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
    let timeout = Duration::from_secs(20);
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
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, format!("status {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    if headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    }) {
        payload = dechunk(&payload)?;
    }
    Ok(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&payload).to_string(),
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
        let size_str = String::from_utf8_lossy(&data[..eol]).to_string();
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

// ------------------------------------------------------------------ metrics

/// Samples of a Prometheus text exposition: (name, labels) -> value.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    pub rows: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Samples {
    pub fn parse(text: &str) -> Samples {
        let mut rows = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = match line.rsplit_once(' ') {
                Some(x) => x,
                None => continue,
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n.to_string(), parse_labels(rest.trim_end_matches('}'))),
                None => (series.trim().to_string(), BTreeMap::new()),
            };
            rows.push((name, labels, value));
        }
        Samples { rows }
    }

    /// Sum of the samples of `name` whose labels include all of `want`.
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.rows
            .iter()
            .filter(|(n, l, _)| {
                n == name && want.iter().all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// Whether a sample of `name` with all of `want` exists.
    pub fn has(&self, name: &str, want: &[(&str, &str)]) -> bool {
        self.rows.iter().any(|(n, l, _)| {
            n == name && want.iter().all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
        })
    }

    /// Cumulative histogram buckets `(le, count)` of `name`, summed over
    /// the series that match `want`, in ascending `le` order.
    pub fn buckets(&self, name: &str, want: &[(&str, &str)]) -> Vec<(f64, f64)> {
        let mut by_le: BTreeMap<String, f64> = BTreeMap::new();
        let bucket = format!("{name}_bucket");
        for (n, l, v) in &self.rows {
            if *n == bucket
                && want.iter().all(|(k, w)| l.get(*k).is_some_and(|x| x == w))
                && let Some(le) = l.get("le")
            {
                *by_le.entry(le.clone()).or_default() += v;
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

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim().trim_start_matches(',').trim().to_string();
        let after = &rest[eq + 1..];
        let Some(after) = after.strip_prefix('"') else {
            break;
        };
        let mut val = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        val.push(match n {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                other => val.push(other),
            }
        }
        out.insert(key, val);
        rest = &after[end..];
    }
    out
}

// ------------------------------------------------------------------ stats

/// CPU time (user + system) a process has used so far, from /proc/<pid>/stat.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after ')'.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / 100.0
}

/// The host's CPU pressure (`some avg10=...` of /proc/pressure/cpu), for reports.
pub fn cpu_pressure() -> String {
    let p = std::fs::read_to_string("/proc/pressure/cpu").unwrap_or_default();
    match p.lines().next().and_then(|l| l.split_whitespace().nth(1)) {
        Some(avg10) => format!("CPU pressure {avg10}"),
        None => "CPU pressure ?".to_string(),
    }
}

/// The 1-minute load average, for reports.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string()
}

/// (median, max, min) of `v`; NaN for an empty slice.
pub fn median_max_min(v: &[f64]) -> (f64, f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (med, s[n - 1], s[0])
}
