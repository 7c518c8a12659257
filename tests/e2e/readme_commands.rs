//! Every command the README shows in a ```sh block either runs here, offline, or is listed in
//! [`SKIPPED`] with the reason. A new README command that is in neither list fails the test, so
//! the README cannot again name a file that is not shipped (`bench.yml` did).
//!
//! What runs, against `tokenprobe simulate` on ephemeral loopback ports:
//! - the README's `simulate` command as written (port and event-log path substituted), which the
//!   README's `bench` command then measures through `config/bench.yml`;
//! - the `probe`, `serve` and `check-config` commands, with a clean simulator standing in for the
//!   llama.cpp server the README's commands and `config/tokenprobe.yml` point at (127.0.0.1:8080).
//!
//! Substitutions (all in [`substitute`]): ports → the simulators' or ephemeral ones; config files
//! → copies in a temp dir with those ports; output and log files → the temp dir; bench's
//! `--requests-per-level 100` and `40` → 5 (100 take a minute per level; the flags and files are
//! what is checked here, bench's numbers are checked in tests/e2e/bench.rs).

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Commands not run, by prefix, with the reason.
const SKIPPED: [(&str, &str); 8] = [
    (
        "scripts/demo.sh",
        "builds the release binary and starts llama.cpp (minutes); tests/peers/demo.rs runs it against a taken port",
    ),
    (
        "scripts/test.sh",
        "runs the whole suite, this test included",
    ),
    (
        "tokenprobe probe --base-url https://api.example.com/v1",
        "a placeholder host and a real API key",
    ),
    ("docker build", "needs Docker and the network"),
    ("kubectl", "needs a Kubernetes cluster"),
    ("helm", "needs a Kubernetes cluster"),
    (
        "scripts/bench/compare.sh",
        "installs GuideLLM and AIPerf from PyPI",
    ),
    (
        "scripts/bench/",
        "measurements taking minutes each (a release build, then the run); they write docs/figures.md",
    ),
];

/// Commands run, by prefix.
const RUN: [&str; 6] = [
    "tokenprobe simulate",
    "tokenprobe bench",
    "tokenprobe probe --base-url http://127.0.0.1:8080/v1",
    "tokenprobe probe --config.file",
    "tokenprobe serve",
    "tokenprobe check-config",
];

/// The commands of every ```sh block: continuation lines joined, comments and blank lines dropped.
fn sh_commands(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        let t = line.trim();
        if !in_sh {
            in_sh = t == "```sh";
            continue;
        }
        if t == "```" {
            in_sh = false;
            continue;
        }
        let code = match t.find(" #") {
            Some(i) => &t[..i],
            None if t.starts_with('#') => "",
            None => t,
        };
        let code = code.trim();
        match code.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head.trim());
                pending.push(' ');
            }
            None => {
                pending.push_str(code);
                let cmd = std::mem::take(&mut pending).trim().to_owned();
                if !cmd.is_empty() {
                    out.push(cmd);
                }
            }
        }
    }
    out
}

/// Kills its process when dropped (a failed assertion leaves nothing running).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tokenprobe() -> &'static str {
    env!("CARGO_BIN_EXE_tokenprobe")
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Splits a command (none of the README's commands quote anything; checked) and runs the
/// binary in place of `tokenprobe`.
fn command(cmd: &str) -> Command {
    assert!(
        !cmd.contains(['"', '\'', '$', '|', '>']),
        "needs a shell: {cmd}"
    );
    let mut words = cmd.split_whitespace();
    assert_eq!(words.next(), Some("tokenprobe"), "{cmd}");
    let mut c = Command::new(tokenprobe());
    c.args(words).current_dir(repo());
    for v in common::PROXY_ENV_VARS {
        c.env_remove(v);
    }
    c
}

/// Starts a simulator; returns it and the address from its first stdout line.
fn simulate(cmd: &str) -> (Guard, String) {
    let mut child = command(cmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn simulate");
    let stdout = child.stdout.take().expect("stdout");
    let guard = Guard(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read simulate's first line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("simulate's first line: {line:?}"))
        .to_owned();
    (guard, addr)
}

/// Waits for the child, killing it after `limit`.
fn wait(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let end = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs a finite command with a time limit; returns (exit code, stdout, stderr).
fn run(cmd: &str, limit: Duration) -> (Option<i32>, String, String) {
    let mut child = command(cmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd}: {e}"));
    let (mut so, mut se) = (
        child.stdout.take().expect("o"),
        child.stderr.take().expect("e"),
    );
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let status = wait(&mut child, limit, cmd);
    (
        status.code(),
        t_out.join().unwrap_or_default(),
        t_err.join().unwrap_or_default(),
    )
}

/// GET over plain HTTP/1.0 (the body).
fn get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

/// Copies a shipped config into `dir` with its loopback address replaced.
fn config_copy(dir: &Path, name: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(text.contains(from), "{name} no longer points at {from}");
    let p = dir.join(Path::new(name).file_name().expect("file name"));
    std::fs::write(&p, text.replace(from, to)).expect("write config copy");
    p
}

struct Env {
    dir: tempfile::TempDir,
    /// The README's simulator (the bench target).
    readme_sim: String,
    /// A fault-free simulator in place of the llama.cpp server.
    clean_sim: String,
}

/// Applies the substitutions listed in the module doc.
fn substitute(cmd: &str, env: &Env) -> String {
    let d = env.dir.path();
    let tokenprobe_yml = config_copy(d, "config/tokenprobe.yml", "127.0.0.1:8080", &env.clean_sim);
    let bench_yml = config_copy(d, "config/bench.yml", "127.0.0.1:8000", &env.readme_sim);
    let mut c = cmd
        .replace("127.0.0.1:8080", &env.clean_sim)
        .replace("--listen 127.0.0.1:8000", "--listen 127.0.0.1:0")
        .replace(
            "http://127.0.0.1:8000",
            &format!("http://{}", env.readme_sim),
        )
        .replace("127.0.0.1:9464", "127.0.0.1:0")
        .replace("/tmp/sim.jsonl", &d.join("sim.jsonl").display().to_string())
        .replace(
            "config/tokenprobe.yml",
            &tokenprobe_yml.display().to_string(),
        )
        .replace("config/bench.yml", &bench_yml.display().to_string())
        .replace("--requests-per-level 100", "--requests-per-level 5")
        .replace("--requests-per-level 40", "--requests-per-level 5");
    for out in ["run.md", "run.json", "run.html"] {
        c = c.replace(
            &format!("-o {out}"),
            &format!("-o {}", d.join(out).display()),
        );
    }
    c
}

fn serve(cmd: &str) {
    let mut child = command(cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let stderr = child.stderr.take().expect("stderr");
    let mut guard = Guard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let re = regex::Regex::new(r#"address="?([0-9.]+:[0-9]+)"?"#).expect("regex");
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(c) = re.captures(&line) {
                let _ = tx.send(c[1].to_owned());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("serve logged no address");
    // config/tokenprobe.yml probes every 5 s, each job first within 5 s of the start: 30 s
    // allows for a loaded machine, and a healthy run takes about 5.
    let end = Instant::now() + Duration::from_secs(30);
    let probed = loop {
        let n: f64 = get(&addr, "/metrics")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("tokenprobe_probes_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if n >= 1.0 || Instant::now() > end {
            break n;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(probed >= 1.0, "serve ran no probe in 30 s");
    let ok = get(&addr, "/metrics").unwrap_or_default();
    assert!(
        ok.lines()
            .any(|l| l.starts_with("tokenprobe_last_probe_success{") && l.ends_with(" 1")),
        "no successful probe against the fault-free simulator:\n{ok}"
    );
    let pid = guard.0.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = wait(&mut guard.0, Duration::from_secs(20), "serve after SIGTERM");
    assert_eq!(status.code(), Some(0), "serve's exit after SIGTERM");
}

#[test]
fn every_readme_command_runs_or_is_listed_as_skipped() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let commands = sh_commands(&readme);
    assert!(commands.len() >= 15, "{commands:#?}");
    let is_run = |c: &str| RUN.iter().any(|p| c.starts_with(p));
    let skipped = |c: &str| SKIPPED.iter().find(|(p, _)| c.starts_with(p));
    for c in &commands {
        assert!(
            is_run(c) || skipped(c).is_some(),
            "README command neither run nor listed as skipped (add it to RUN or SKIPPED): {c}"
        );
    }
    for (p, _) in SKIPPED {
        assert!(
            commands.iter().any(|c| c.starts_with(p)),
            "SKIPPED lists {p:?}, which the README no longer shows"
        );
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let (_clean, clean_sim) =
        simulate("tokenprobe simulate --listen 127.0.0.1:0 --ttft 20ms --itl 2ms");
    let sim_cmd = commands
        .iter()
        .find(|c| c.starts_with("tokenprobe simulate"))
        .expect("the README shows simulate");
    let mut env = Env {
        dir,
        readme_sim: String::new(),
        clean_sim,
    };
    let (_readme_sim_guard, readme_sim) = simulate(&substitute(sim_cmd, &env));
    env.readme_sim = readme_sim;

    let mut ran = Vec::new();
    for c in commands.iter().filter(|c| is_run(c)) {
        let cmd = substitute(c, &env);
        if c.starts_with("tokenprobe simulate") {
            // Started above; the bench below measures it.
        } else if c.starts_with("tokenprobe serve") {
            serve(&cmd);
        } else if c.starts_with("tokenprobe bench --base-url") {
            // Bench from flags alone: two models of the README's simulator, no config file.
            let (code, out, err) = run(&cmd, Duration::from_secs(180));
            assert_eq!(code, Some(0), "{cmd}\n{out}\n{err}");
            for model in ["sim-a", "sim-b"] {
                assert!(out.contains(&format!("│ {model} ")), "{cmd}\n{out}\n{err}");
            }
        } else if c.starts_with("tokenprobe bench") {
            // 5 levels × 5 requests of ≈0.5 s, a stall fault costing its 2 s deadline: ~10 s.
            let (code, out, err) = run(&cmd, Duration::from_secs(180));
            assert_eq!(code, Some(0), "{cmd}\n{out}\n{err}");
            let md = std::fs::read_to_string(env.dir.path().join("run.md")).expect("run.md");
            assert!(
                md.starts_with("### tokenprobe bench: sim (openai-chat)"),
                "{md}"
            );
            let json: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(env.dir.path().join("run.json")).expect("run.json"),
            )
            .expect("run.json is JSON");
            let levels = json["models"][0]["levels"].as_array().map(Vec::len);
            assert_eq!(levels, Some(5), "concurrency 1,5,10,20,50");
            let log = std::fs::read_to_string(env.dir.path().join("sim.jsonl")).unwrap_or_default();
            assert!(
                log.lines().count() > 0,
                "the README's simulator logged no event"
            );
        } else {
            // probe and check-config: finite, exit 0.
            let (code, out, err) = run(&cmd, Duration::from_secs(60));
            assert_eq!(code, Some(0), "{cmd}\n{out}\n{err}");
            if c.starts_with("tokenprobe probe") {
                assert!(out.contains("outcome    success"), "{cmd}\n{out}");
            }
        }
        ran.push(c.clone());
    }
    assert_eq!(ran.len(), 9, "ran: {ran:#?}");
}
