//! Child processes of the tests: a [`Proc`] killed on drop, and [`serve`], a `tokenprobe serve`
//! on an ephemeral port with its JSON log lines collected.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child process, killed on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig}");
    }

    /// Waits up to `limit` for the process to exit; how long it took, or `None`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<Duration> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if self.0.try_wait().expect("try_wait").is_some() {
                return Some(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

/// `tokenprobe serve` (optionally under `prlimit --nofile=N:N`); its address and its log lines.
pub fn serve(
    config: &Path,
    extra: &[&str],
    nofile: Option<u32>,
) -> (Proc, SocketAddr, Arc<Mutex<Vec<String>>>) {
    let mut cmd = match nofile {
        Some(n) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={n}:{n}"))
                .arg("--")
                .arg(super::tokenprobe_bin());
            c
        }
        None => Command::new(super::tokenprobe_bin()),
    };
    let mut child = cmd
        .args(["serve", "--config.file"])
        .arg(config)
        .args([
            "--web.listen-address",
            "127.0.0.1:0",
            "--log.format",
            "json",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let stderr = child.stderr.take().expect("stderr");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let l = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && let Some(a) = v.get("address").and_then(|a| a.as_str())
            {
                let _ = tx.send(a.to_owned());
            }
            l.lock().unwrap().push(line);
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("serve did not log its address")
        .parse()
        .expect("address");
    (Proc(child), addr, lines)
}
