//! The shipped example configs stay valid: `check-config` accepts `config/tokenprobe.yml`, and
//! `config/example-full.yml` fails only on what needs a real machine (its key file).

use std::process::Command;

fn check(path: &str, envs: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tokenprobe"));
    cmd.args(["check-config", "--config.file", path])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run check-config");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn quickstart_config_is_valid() {
    let (code, text) = check("config/tokenprobe.yml", &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("local/smollm2/hello"), "{text}");
}

#[test]
fn full_example_fails_only_on_the_missing_key_file() {
    let (code, text) = check(
        "config/example-full.yml",
        &[("VLLM_API_KEY", "k1"), ("AZURE_OPENAI_API_KEY", "k2")],
    );
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("1 problem"), "{text}");
    assert!(text.contains("api_key_file"), "{text}");
    assert!(
        !text.contains("k1") && !text.contains("k2"),
        "secrets never printed: {text}"
    );
}

#[test]
fn missing_env_var_is_named_with_its_line() {
    let (code, text) = check("config/example-full.yml", &[]);
    assert_eq!(code, Some(2));
    assert!(
        text.contains("environment variable VLLM_API_KEY is not set"),
        "{text}"
    );
    assert!(text.contains("targets[0].api_key"), "{text}");
}

/// The example trace replays' config is valid (each trace read and parsed), so are the sessions'
/// (its session trace read) and the session benchmark's, and the example traces are the ones their script writes.
#[test]
fn trace_examples_are_valid_and_made_by_their_script() {
    let (code, text) = check("examples/traces/replay.yml", &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("valid, 3 jobs"), "{text}");
    let (code, text) = check("examples/sessions/sessions.yml", &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("valid, 2 jobs"), "{text}");
    let (code, text) = check("examples/sessions/bench.yml", &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("valid, 2 jobs"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/traces");
    let out = Command::new("python3")
        .arg(here.join("make.py"))
        .arg(dir.path())
        .output()
        .expect("run python3");
    assert!(out.status.success(), "{out:?}");
    for name in [
        "mooncake.jsonl",
        "azure.csv",
        "burstgpt.csv",
        "sessions.jsonl",
    ] {
        assert_eq!(
            std::fs::read(dir.path().join(name)).unwrap(),
            std::fs::read(here.join(name)).unwrap(),
            "{name} is not what make.py writes"
        );
    }
}
