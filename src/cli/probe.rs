//! `tokenprobe probe`: its flags, their conversion into a [`ProbeSpec`] (from the flags alone, or
//! from a target of a config file with the flags on top), and the one probe with its report.

use super::target_flags::TargetFlags;
use crate::config::{Config, ConfigError};
use crate::exit::Exit;
use crate::output::{print_stderr_line, print_stdout};
use crate::probe::report::{ReportContext, to_json, to_text};
use crate::probe::{ProbeSpec, Prober};
use anyhow::{Context, Result};
use clap::ValueEnum;
use std::path::PathBuf;

/// `probe --format`: how the probe's result is shown on stdout.
// clap shows a variant's doc comment as its help, which would change `--help`.
#[allow(missing_docs)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProbeFormat {
    Text,
    Json,
}

/// Flags of `tokenprobe probe`.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// The target and its prompt as flags (without --config.file).
    #[command(flatten)]
    pub target_flags: TargetFlags,
    /// Model name to ask for.
    #[arg(long, required_unless_present = "config_file")]
    pub model: Option<String>,
    /// The user message.
    #[arg(long, default_value = "Say hello in five words.")]
    pub prompt: String,
    /// Output cap (max_tokens, at least 1).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: u32,
    /// Ask for the whole answer at once ("stream": false): E2E, output and input tokens only.
    #[arg(long)]
    pub no_stream: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ProbeFormat::Text)]
    pub format: ProbeFormat,
    /// Probe a target of this config file instead of --base-url (with --target).
    #[arg(long = "config.file", required_unless_present = "base_url")]
    pub config_file: Option<PathBuf>,
    /// Target name in the config file (its first model and prompt, unless --model is given).
    #[arg(long, requires = "config_file")]
    pub target: Option<String>,
}

/// The probe these flags ask for: from `--config.file`'s target, or from the flags alone.
///
/// # Errors
/// An unusable flag value or config, said without quoting secret values.
pub fn spec_from_args(a: &ProbeArgs) -> Result<ProbeSpec> {
    if let Some(cfg) = &a.config_file {
        if let Some(flag) = a.target_flags.target_only_flag() {
            anyhow::bail!(
                "{flag} describes a target given as flags (--base-url); with --config.file set it in the config's target"
            );
        }
        let config = Config::load(cfg).map_err(|e| match e {
            e @ (ConfigError::Io { .. } | ConfigError::Syntax(_)) => anyhow::anyhow!("{e}"),
            e => anyhow::anyhow!("{}: {e}", cfg.display()),
        })?;
        return job_spec(&config, cfg, a.target.as_deref(), a.model.as_deref());
    }
    let (Some(base_url), Some(model)) = (&a.target_flags.base_url, &a.model) else {
        anyhow::bail!("--base-url and --model are required without --config.file");
    };
    // The flags are a one-target config: the config's rules check them, and only them.
    let flags = a
        .target_flags
        .flag_target(
            "probe".into(),
            base_url.clone(),
            vec![model.clone()],
            a.prompt.clone(),
            a.max_tokens,
        )
        .map_err(|e| anyhow::anyhow!(e))?;
    let config = Config::from_flags(&flags).map_err(|e| match e {
        ConfigError::Invalid(issues) => anyhow::anyhow!(
            "invalid flags: {}",
            issues
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        ),
        other => anyhow::anyhow!("{other}"),
    })?;
    let job = config.jobs.first().context("the flags define no probe")?;
    Ok(ProbeSpec::from_job(job))
}

/// The spec of `--target` (default: the first target) in a config: its job for `--model` when the
/// config lists that model, else its first job with the model replaced (as `bench` accepts any
/// model). An unknown target is an error that lists the targets there are.
fn job_spec(
    config: &Config,
    file: &std::path::Path,
    target: Option<&str>,
    model: Option<&str>,
) -> Result<ProbeSpec> {
    let of_target: Vec<_> = config
        .jobs
        .iter()
        .filter(|j| target.is_none_or(|t| j.target.name == t))
        .collect();
    let Some(first) = of_target.first() else {
        let mut names: Vec<&str> = config.jobs.iter().map(|j| j.target.name.as_str()).collect();
        names.dedup();
        anyhow::bail!(
            "{} has no target named {:?}; its targets: {}",
            file.display(),
            target.unwrap_or(""),
            names.join(", ")
        );
    };
    let job = model
        .and_then(|m| of_target.iter().find(|j| j.model == m))
        .unwrap_or(first);
    let mut spec = ProbeSpec::from_job(job);
    if let Some(m) = model {
        spec.model = m.to_owned();
    }
    Ok(spec)
}

/// Runs one probe and prints its report; exit 0 on success, 1 when the probe failed.
///
/// # Errors
/// Bad flags or config (exit 2).
pub async fn run(a: ProbeArgs) -> Result<Exit> {
    let mut spec = spec_from_args(&a)?;
    if a.no_stream {
        spec.stream = false;
    }
    if a.config_file.is_some() {
        // Deadline flags still apply on top of a configured target.
        spec.timeouts = a.target_flags.deadlines(spec.timeouts);
    }
    if spec.target.tls.insecure_skip_verify {
        print_stderr_line(
            "tokenprobe: WARNING: --insecure-skip-verify: the server certificate is NOT verified",
        );
    }
    let mut prober = Prober::new(&spec)?;
    // A prompt built to a token length is sized by the server's own counts first.
    let calibration = if spec.workload.needs_token_model() {
        let c = crate::probe::calibrate(&mut prober, &spec).await;
        if c.error.is_some() {
            // Never a prompt of a guessed length: the probe is not sent.
            return Err(super::Refused {
                exit: Exit::Failed,
                message: format!(
                    "calibration failed: {}; the probe is not sent at a guessed length",
                    c.summary()
                ),
            }
            .into());
        }
        spec.tokens = c.model();
        Some(c)
    } else {
        None
    };
    if matches!(spec.workload, crate::workload::Workload::Session(_)) {
        return run_session(&a, &spec, prober, calibration.as_ref()).await;
    }
    let result = prober.run(&spec).await;
    // The report is made whole, then printed: JSON on stdout with the failure's line on stderr
    // (a pipe reads the JSON alone), or the text.
    let (out, failed) = match a.format {
        ProbeFormat::Json => {
            let mut v = to_json(&result);
            if let (Some(o), Some(c)) = (v.as_object_mut(), &calibration) {
                o.insert(
                    "calibration".into(),
                    serde_json::to_value(c).unwrap_or_default(),
                );
            }
            let failed = result.error_type.map(|e| {
                format!(
                    "tokenprobe: probe failed: {e} (HTTP {}): {}",
                    result.http_status.map_or("-".into(), |s| s.to_string()),
                    result.error_detail.as_deref().unwrap_or("")
                )
            });
            (format!("{v}\n"), failed)
        }
        ProbeFormat::Text => {
            let context = ReportContext {
                url: spec.url(),
                model: spec.model.clone(),
                proxy: spec.proxy(),
                calibration: calibration.as_ref().map(crate::probe::Calibration::summary),
                exact_output: spec.target.exact_output,
            };
            (to_text(&result, &context), None)
        }
    };
    print_stdout(&out);
    if let Some(line) = failed {
        print_stderr_line(&line);
    }
    Ok(if result.success() {
        Exit::Done
    } else {
        Exit::Failed
    })
}

/// A session prompt: one whole session (its sub-agents in parallel), each turn reported; exit 0
/// when it ended as its prompt says (its final answer, or its context budget), 1 when a turn
/// failed.
async fn run_session(
    a: &ProbeArgs,
    spec: &ProbeSpec,
    prober: Prober,
    calibration: Option<&crate::probe::Calibration>,
) -> Result<Exit> {
    use crate::probe::report::{session_to_json, session_to_text};
    let mut probers = vec![prober];
    let stop = tokio_util::sync::CancellationToken::new();
    let run = crate::probe::session::run(spec, &mut probers, 0, &stop).await?;
    let failed = run.turns.iter().find(|t| !t.result.success());
    let out = match a.format {
        ProbeFormat::Json => {
            let mut v = session_to_json(&run);
            if let (Some(o), Some(c)) = (v.as_object_mut(), calibration) {
                o.insert(
                    "calibration".into(),
                    serde_json::to_value(c).unwrap_or_default(),
                );
            }
            format!("{v}\n")
        }
        ProbeFormat::Text => session_to_text(
            &run,
            &ReportContext {
                url: spec.url(),
                model: spec.model.clone(),
                proxy: spec.proxy(),
                calibration: calibration.map(crate::probe::Calibration::summary),
                exact_output: spec.target.exact_output,
            },
        ),
    };
    print_stdout(&out);
    if let (Some(t), ProbeFormat::Json) = (failed, a.format) {
        print_stderr_line(&format!(
            "tokenprobe: session turn {} (branch {}) failed: {}: {}",
            t.turn,
            t.session.branch,
            t.result.error_type.map_or("-", |e| e.as_str()),
            t.result.error_detail.as_deref().unwrap_or("")
        ));
    }
    Ok(
        if failed.is_some() || run.end == Some(crate::workload::session::End::Failed) {
            Exit::Failed
        } else {
            Exit::Done
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AuthStyle, Timeouts};
    use clap::Parser;
    use std::time::Duration;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        probe: ProbeArgs,
    }

    fn spec(args: &[&str]) -> Result<ProbeSpec> {
        let mut argv = vec!["probe"];
        argv.extend_from_slice(args);
        let a = Cmd::try_parse_from(argv)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .probe;
        spec_from_args(&a)
    }

    fn error(args: &[&str]) -> String {
        match spec(args) {
            Ok(s) => panic!("accepted {args:?}: {s:?}"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn flags_become_the_spec() {
        let s = spec(&[
            "--base-url",
            "http://127.0.0.1:8080/v1/",
            "--model",
            "m",
            "--max-tokens",
            "9",
            "--header",
            "X-Team=sre",
            "--query",
            "api-version=2024-10-21",
            "--timeout-first-token",
            "3s",
            "--proxy",
            "none",
            "--nonce",
            "--no-usage",
        ])
        .expect("spec");
        assert_eq!(
            s.target.base_url, "http://127.0.0.1:8080/v1",
            "trailing slash dropped"
        );
        assert_eq!(
            s.url(),
            "http://127.0.0.1:8080/v1/chat/completions?api-version=2024-10-21"
        );
        assert_eq!((s.model.as_str(), s.max_tokens), ("m", Some(9)));
        assert_eq!(s.target.headers, [("X-Team".to_owned(), "sre".to_owned())]);
        assert_eq!(s.timeouts.first_token, Duration::from_secs(3));
        assert_eq!(s.timeouts.total, Timeouts::default().total);
        assert!(s.prompt.nonce && !s.target.include_usage);
        assert!(matches!(
            s.target.proxy,
            crate::config::ProxySetting::Disabled
        ));
        assert_eq!(s.target.auth, AuthStyle::Bearer);
        assert!(
            matches!(&s.prompt.workload, crate::workload::Workload::Messages(m) if m.len() == 1)
        );
    }

    #[test]
    fn the_key_header_follows_the_protocol_unless_asked() {
        let base = ["--base-url", "https://api.example.com", "--model", "c"];
        let anthropic =
            spec(&[&base[..], &["--api", "anthropic-messages"]].concat()).expect("spec");
        assert_eq!(anthropic.target.auth, AuthStyle::XApiKey);
        assert_eq!(anthropic.url(), "https://api.example.com/v1/messages");
        let azure = spec(&[&base[..], &["--auth", "api-key"]].concat()).expect("spec");
        assert_eq!(azure.target.auth, AuthStyle::ApiKey);
    }

    #[test]
    fn bad_flags_are_refused_without_quoting_their_values() {
        let base = ["--base-url", "http://h/v1", "--model", "m"];
        let with = |extra: &[&str]| error(&[&base[..], extra].concat());
        let e = with(&["--header", "Authorization: Bearer sk-secret-1"]);
        assert!(e.contains("--header") && !e.contains("sk-secret-1"), "{e}");
        let e = with(&["--query", "no-equals-sign-secret"]);
        assert!(
            e.contains("--query") && !e.contains("no-equals-sign-secret"),
            "{e}"
        );
        let e = with(&["--proxy", "ftp://u:proxy-secret@p"]);
        assert!(e.contains("--proxy") && !e.contains("proxy-secret"), "{e}");
        let e = error(&["--base-url", "ftp://u:url-secret@h", "--model", "m"]);
        assert!(e.contains("http") && !e.contains("url-secret"), "{e}");
        let e = error(&["--base-url", "http://h/v1", "--model", " "]);
        assert!(e.contains("--model"), "{e}");
        let e = error(&[
            "--base-url",
            "http://h/v1",
            "--model",
            "m",
            "--api-key-env",
            "TOKENPROBE_SURELY_UNSET_VAR",
        ]);
        assert_eq!(e.matches("TOKENPROBE_SURELY_UNSET_VAR").count(), 1, "{e}");
    }

    #[test]
    fn a_config_target_with_the_flags_on_top() {
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/bench.yml");
        let s = spec(&[
            "--config.file",
            config,
            "--target",
            "sim",
            "--model",
            "unlisted",
        ])
        .expect("spec");
        assert_eq!(
            s.model, "unlisted",
            "a model the config does not list is probed as asked"
        );
        assert_eq!(s.target.base_url, "http://127.0.0.1:8000/v1");
        let e = error(&["--config.file", config, "--target", "nope"]);
        assert!(
            e.contains("nope") && e.contains("sim"),
            "lists the targets there are: {e}"
        );
    }
}
