//! Helpers specific to `tests/peers/llmock.rs` and `tests/peers/guidellm.rs`: third-party mock
//! servers from the project venv (`llmock serve`, `guidellm mock-server`),
//! `tokenprobe probe` / `tokenprobe serve` as child processes, `/proc` readers.
//! The generic pieces (children killed on drop, the HTTP/1.1 client, the
//! Prometheus text-format reader, `wait_for`, the watchdog) live in
//! `tests/common/e2e.rs`.
//!
//! What these tests need is installed by `scripts/ci/install-fault-deps.sh`. A missing
//! piece FAILS the test with that hint: these tests never skip.

use super::e2e::{
    ChildGuard, SIGKILL, Samples, free_port, http_request_within, json_logs, median,
    run_with_timeout, tokenprobe_bin, tokenprobe_metrics, try_http_request_within, venv, wait_for,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

pub const INSTALL_HINT: &str =
    "run scripts/ci/install-fault-deps.sh (scripts/ci/install-test-deps.sh runs it)";

// ------------------------------------------------------------------ setup

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

/// Every step of an HTTP request to a mock or to tokenprobe is bounded by this
/// (`crate::e2e::http_request_within`).
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(20);

/// A child killed and reaped on drop, SIGKILLed by the kernel if the test
/// thread that started it dies.
pub fn spawn(name: &str, cmd: Command, dir: &Path) -> ChildGuard {
    ChildGuard::spawn_with_deathsig(name, cmd, dir, SIGKILL)
}

// ------------------------------------------------------------------ llmock

/// `llmock serve` on an ephemeral port (uvicorn binds port 0 and logs the real one).
pub struct Llmock {
    pub proc: ChildGuard,
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
        let mut proc = spawn("llmock", cmd, dir);
        // With --log-level warning uvicorn does not print its address; ask the
        // kernel instead: the one listening socket of that pid.
        let pid = proc.id();
        let port = wait_for("llmock to listen", Duration::from_secs(30), || {
            proc.assert_running();
            listening_ports(pid).into_iter().next()
        });
        let url = format!("http://127.0.0.1:{port}");
        wait_for("llmock /health", Duration::from_secs(10), || {
            try_http_request_within("GET", &format!("{url}/health"), &[], b"", HTTP_TIMEOUT)
                .ok()
                .filter(|r| r.status == 200)
        });
        Llmock { proc, port, url }
    }

    /// Queues behaviours (`POST /_llmock/scenario`).
    pub fn scenario(&self, behaviors: serde_json::Value) {
        let body = serde_json::json!({ "behaviors": behaviors }).to_string();
        let r = http_request_within(
            "POST",
            &format!("{}/_llmock/scenario", self.url),
            &[("Content-Type", "application/json")],
            body.as_bytes(),
            HTTP_TIMEOUT,
        );
        assert_eq!(r.status, 201, "llmock scenario rejected: {}", r.body);
    }

    /// llmock's own journal (`GET /_llmock/requests`).
    pub fn requests(&self) -> Vec<serde_json::Value> {
        let r = http_request_within(
            "GET",
            &format!("{}/_llmock/requests", self.url),
            &[],
            b"",
            HTTP_TIMEOUT,
        );
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

/// True once process `pid` has accepted the connection `client` made to it: the server's end of
/// it (local port the client's peer port, remote port the client's port) is a socket among
/// `pid`'s open files. Before `accept()` the kernel's table shows that end with inode 0.
pub fn accepted(pid: u32, client: &std::net::TcpStream) -> bool {
    let (Ok(local), Ok(peer)) = (client.local_addr(), client.peer_addr()) else {
        return false;
    };
    let inodes = socket_inodes(pid);
    tcp_table().into_iter().any(|e| {
        e.local_port == peer.port()
            && e.remote_port == local.port()
            && e.inode != 0
            && inodes.contains(&e.inode)
    })
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
    pub proc: ChildGuard,
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
            let mut proc = spawn(&format!("guidellm-{attempt}"), cmd, dir);
            let url = format!("http://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if proc.exited().is_some() {
                    break;
                }
                if try_http_request_within("GET", &format!("{url}/health"), &[], b"", HTTP_TIMEOUT)
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
        let r = http_request_within(
            "POST",
            &format!("{}/v1/chat/completions", self.url),
            &[("Content-Type", "application/json")],
            body.as_bytes(),
            HTTP_TIMEOUT,
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
    let (st, out, err) = run_with_timeout(cmd, None, limit);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| {
        panic!("probe {args:?}: stdout is not one JSON object ({e}):\n{out}\nstderr:\n{err}")
    });
    (st.code().unwrap_or(-1), v, err)
}

/// `tokenprobe serve` on an ephemeral port; the address comes from its first
/// JSON log line (`address`).
pub struct Serve {
    pub proc: ChildGuard,
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
        let mut proc = spawn(name, cmd, dir);
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
        tokenprobe_metrics(&mut self.proc, &self.url)
    }

    /// JSON log lines with `fields` flattened into the top level.
    pub fn json_logs(&self) -> Vec<serde_json::Map<String, serde_json::Value>> {
        json_logs(&self.proc)
    }
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
    let (max, min) = (s[s.len() - 1], s[0]);
    (median(s), max, min)
}
