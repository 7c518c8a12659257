//! Runs `scripts/ci/check-deploy.sh` (the static checks of `grafana/` and `deploy/`: Grafana schema
//! types, Prometheus rules and their unit tests, Kubernetes manifests, Helm chart, custom resource
//! schemas, YAML lint, Dockerfile lint, and `tokenprobe check-config` on every ConfigMap's config,
//! with this build's binary) so that `cargo test` covers them. The script installs its
//! own pinned tools on first use (`.venv-deploy/`, `scripts/ci/deploy-check/node_modules/`); promtool
//! comes from `scripts/ci/install-test-deps.sh`.
//!
//! `TOKENPROBE_SKIP_E2E=1` skips it on a developer machine without the tools, never under CI.

use crate::common;
use common::e2e;

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn deploy_artifacts_pass_check_deploy_sh() {
    let have_promtool = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_promtool
        && !e2e::in_ci()
        && std::env::var("TOKENPROBE_SKIP_E2E").is_ok_and(|v| v == "1")
    {
        eprintln!(
            "SKIPPED (TOKENPROBE_SKIP_E2E=1): promtool missing: run scripts/ci/install-test-deps.sh"
        );
        return;
    }

    let root = e2e::repo_root();
    let script = root.join("scripts/ci/check-deploy.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .current_dir(&root)
        // So the script also runs `tokenprobe check-config` on every ConfigMap's config.
        .env("TOKENPROBE_BIN", env!("CARGO_BIN_EXE_tokenprobe"));
    // A fresh install takes well under a minute; the checks themselves a few seconds.
    let (status, stdout, stderr) = e2e::run_with_timeout(cmd, None, Duration::from_secs(600));
    eprintln!("{stdout}{stderr}");
    assert!(
        status.success(),
        "scripts/ci/check-deploy.sh failed ({status}):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(" 0 failed"),
        "scripts/ci/check-deploy.sh printed no summary:\n{stdout}"
    );
}
