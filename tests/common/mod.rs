//! The one helper tree of the integration tests: headless Chromium ([`browser`]), the
//! stream-case parser ([`case`]), the replay server ([`replay_server`]), the end-to-end helpers
//! ([`e2e`]: child processes, llama.cpp, `serve`, an HTTP client, a metrics reader), the
//! third-party mocks ([`faults`]: llmock, guidellm) and `tokenprobe serve` as a child process
//! ([`serve`]).
//!
//! Each integration test that says `mod common;` compiles this module anew and may use only part
//! of it, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod browser;
pub mod case;
pub mod e2e;
pub mod faults;
pub mod replay_server;
pub mod serve;

use std::path::{Path, PathBuf};

/// Every proxy variable a client library may read; removed from a prober's environment unless a
/// test sets up a proxy on purpose.
pub const PROXY_ENV_VARS: [&str; 8] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// A self-signed test certificate for `localhost` and `127.0.0.1` (an end entity, not a CA, as
/// rustls requires of a trusted leaf), made by `openssl` in `dir`; returns the certificate's and
/// the key's paths.
pub fn test_cert(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "openssl could not make a test certificate");
    (cert, key)
}

/// The case directory: `$TOKENPROBE_CASES_DIR`, else the repository's copy `<crate>/tests/cases`.
pub fn cases_dir() -> PathBuf {
    match std::env::var_os("TOKENPROBE_CASES_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => default_cases_dir(),
    }
}

/// `<crate>/tests/cases`, ignoring the override (for tests of specific, known cases).
pub fn default_cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases")
}

/// Every `*.expect.json` in `dir`, sorted by name.
pub fn expect_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(".expect.json"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The case name of an expect file: `NN-name` of `NN-name.expect.json`.
pub fn case_name(expect_path: &Path) -> String {
    expect_path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".expect.json"))
        .unwrap_or("?")
        .to_string()
}

/// The tokenprobe binary: `$TOKENPROBE_BIN`, else the one Cargo built for this test run, else
/// `target/<profile>/tokenprobe` next to the test executable's `deps/` directory.
pub fn tokenprobe_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("TOKENPROBE_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    if let Some(bin) = option_env!("CARGO_BIN_EXE_tokenprobe") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    profile_dir.join(format!("tokenprobe{}", std::env::consts::EXE_SUFFIX))
}

/// The release binary scripts/test.sh builds before the tests (`$TOKENPROBE_RELEASE_BIN`), for
/// figures of the real artefact (its size, its memory); the test fails without it.
#[allow(dead_code)]
pub fn release_bin() -> PathBuf {
    match std::env::var_os("TOKENPROBE_RELEASE_BIN").filter(|b| !b.is_empty()) {
        Some(b) => PathBuf::from(b),
        None => panic!(
            "TOKENPROBE_RELEASE_BIN is not set: scripts/test.sh builds the release binary and sets it \
             (or: cargo build --release && TOKENPROBE_RELEASE_BIN=target/release/tokenprobe cargo test ...)"
        ),
    }
}
