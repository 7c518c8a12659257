//! Runs `scripts/check-deploy.sh` (the static checks of `grafana/` and `deploy/`: Grafana schema
//! types, Prometheus rules and their unit tests, Kubernetes manifests, Helm chart, custom resource
//! schemas, YAML lint, Dockerfile lint, and `tokenprobe check-config` on every ConfigMap's config,
//! with this build's binary) so that `cargo test` covers them. The script installs its
//! own pinned tools on first use (`.venv-deploy/`, `scripts/deploy-check/node_modules/`); promtool
//! comes from `scripts/install-test-deps.sh`.
//!
//! `TOKENPROBE_SKIP_E2E=1` skips it on a developer machine without the tools, never under CI.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn deploy_artifacts_pass_check_deploy_sh() {
    let in_ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
    let have_promtool = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_promtool && !in_ci && std::env::var("TOKENPROBE_SKIP_E2E").is_ok_and(|v| v == "1") {
        eprintln!(
            "SKIPPED (TOKENPROBE_SKIP_E2E=1): promtool missing: run scripts/install-test-deps.sh"
        );
        return;
    }

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("scripts").join("check-deploy.sh");
    let mut child = Command::new("bash")
        .arg(&script)
        .current_dir(&root)
        // So the script also runs `tokenprobe check-config` on every ConfigMap's config.
        .env("TOKENPROBE_BIN", env!("CARGO_BIN_EXE_tokenprobe"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn bash {}: {e}", script.display()));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    // A fresh install takes well under a minute; the checks themselves a few seconds.
    let limit = Duration::from_secs(600);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("scripts/check-deploy.sh did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (stdout, stderr) = (out_t.join().unwrap(), err_t.join().unwrap());
    eprintln!("{stdout}{stderr}");
    assert!(
        status.success(),
        "scripts/check-deploy.sh failed ({status}):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(" 0 failed"),
        "scripts/check-deploy.sh printed no summary:\n{stdout}"
    );
}
