//! A target, model and prompt given on the command line (`tokenprobe probe --base-url ...`),
//! validated by the very rules of a config file: the flags become the raw config a file would
//! give and go through [`super::validate`], and the files they name through the same checks as
//! [`Config::load`]'s. A problem names the flag it came from instead of a key path.

use super::raw::{RawConfig, RawPrompt, RawTarget, RawTimeouts, S};
use super::types::{AuthStyle, Config, ConfigError, ConnectionMode, Issue};
use crate::protocol::{Api, Message};
use serde_saphyr::{Location, Spanned};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// What the `probe` command's flags say about one target, model and prompt.
#[derive(Debug, Clone)]
pub struct FlagTarget {
    /// `--base-url`.
    pub base_url: String,
    /// `--api`.
    pub api: Api,
    /// `--model`.
    pub model: String,
    /// `--api-key-env`: the name of the variable holding the key.
    pub api_key_env: Option<String>,
    /// `--api-key-file`.
    pub api_key_file: Option<PathBuf>,
    /// `--auth` (default: the protocol's header).
    pub auth: Option<AuthStyle>,
    /// `--header NAME=VALUE`, in order.
    pub headers: Vec<(String, String)>,
    /// `--query NAME=VALUE`, in order.
    pub query: Vec<(String, String)>,
    /// `--proxy` (a URL, or `none`).
    pub proxy: Option<String>,
    /// `--ca-file`.
    pub ca_file: Option<PathBuf>,
    /// `--insecure-skip-verify`.
    pub insecure_skip_verify: bool,
    /// Not `--no-usage`.
    pub include_usage: bool,
    /// `--prompt`: the user message.
    pub prompt: String,
    /// `--max-tokens`.
    pub max_tokens: u32,
    /// `--nonce`.
    pub nonce: bool,
    /// `--timeout-connect`, `--timeout-first-token`, `--timeout-idle`, `--timeout-total`.
    pub timeouts: [Option<Duration>; 4],
}

/// The name of the one target and prompt the flags describe.
const NAME: &str = "probe";

fn at<T>(value: T) -> S<T> {
    Spanned::new(value, Location::UNKNOWN, Location::UNKNOWN)
}

/// The flag a config key path came from.
fn flag_of(path: &str) -> &'static str {
    let key = path
        .split_once('.')
        .map_or(path, |(_, rest)| rest)
        .split(['.', '['])
        .next()
        .unwrap_or("");
    match key {
        "base_url" => "--base-url",
        "api_key" => "--api-key-env",
        "api_key_file" => "--api-key-file",
        "models" => "--model",
        "headers" => "--header",
        "query" => "--query",
        "proxy" => "--proxy",
        "ca_file" => "--ca-file",
        "auth" => "--auth",
        "max_tokens" => "--max-tokens",
        "messages" => "--prompt",
        "timeouts" => match path.rsplit('.').next() {
            Some("connect") => "--timeout-connect",
            Some("first_token") => "--timeout-first-token",
            Some("idle") => "--timeout-idle",
            _ => "--timeout-total",
        },
        _ => "flags",
    }
}

impl FlagTarget {
    /// The raw config a file with this target, model and prompt would give.
    fn raw(&self) -> RawConfig {
        let secs = |d: Option<Duration>| d.map(|d| at(humantime::format_duration(d).to_string()));
        let [connect, first_token, idle, total] = self.timeouts;
        RawConfig {
            defaults: None,
            prompts: vec![RawPrompt {
                name: at(NAME.to_owned()),
                messages: vec![Message {
                    role: "user".into(),
                    content: self.prompt.clone(),
                }],
                max_tokens: Some(self.max_tokens),
                nonce: self.nonce,
                expect: None,
            }],
            targets: vec![RawTarget {
                name: at(NAME.to_owned()),
                base_url: at(self.base_url.clone()),
                api: self.api,
                // The config's own `${VAR}` expansion reads the variable.
                api_key: self.api_key_env.as_ref().map(|v| at(format!("${{{v}}}"))),
                api_key_file: self
                    .api_key_file
                    .as_ref()
                    .map(|p| at(p.display().to_string())),
                models: at(vec![self.model.clone()]),
                prompts: None,
                interval: None,
                cron: None,
                timeouts: Some(RawTimeouts {
                    connect: secs(connect),
                    first_token: secs(first_token),
                    idle: secs(idle),
                    total: secs(total),
                }),
                include_usage: self.include_usage,
                headers: self.headers.iter().cloned().collect::<BTreeMap<_, _>>(),
                extra_body: serde_json::Map::new(),
                query: self.query.iter().cloned().collect::<BTreeMap<_, _>>(),
                auth: self.auth,
                proxy: self.proxy.as_ref().map(|p| at(p.clone())),
                ca_file: self.ca_file.as_ref().map(|p| at(p.display().to_string())),
                insecure_skip_verify: self.insecure_skip_verify,
                connection: ConnectionMode::New,
                server_metrics: Vec::new(),
            }],
            buckets: None,
        }
    }
}

impl Config {
    /// The config of one target, model and prompt given as flags, by the rules of a config file
    /// (the files it names checked as [`Config::load`] checks them).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with every problem, each path replaced by the flag it came from.
    pub fn from_flags(flags: &FlagTarget) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        if let Some(v) = &flags.api_key_env
            && (v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        {
            problems.push(flag_issue(
                "--api-key-env",
                "must name an environment variable (letters, digits, _)",
            ));
        }
        if !problems.is_empty() {
            return Err(ConfigError::Invalid(problems));
        }
        let mut checked = super::validate::config(&flags.raw());
        let files: Vec<Issue> = checked
            .files
            .iter()
            .filter_map(super::file_problem)
            .collect();
        checked.issues.extend(files);
        checked.finish().map_err(|e| match e {
            ConfigError::Invalid(issues) => ConfigError::Invalid(
                issues
                    .into_iter()
                    .map(|i| flag_issue(flag_of(&i.path), &i.message))
                    .collect(),
            ),
            other => other,
        })
    }
}

fn flag_issue(flag: &str, message: &str) -> Issue {
    Issue {
        path: flag.to_owned(),
        line: 0,
        column: 0,
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> FlagTarget {
        FlagTarget {
            base_url: "http://127.0.0.1:8080/v1".into(),
            api: Api::OpenaiChat,
            model: "m".into(),
            api_key_env: None,
            api_key_file: None,
            auth: None,
            headers: Vec::new(),
            query: Vec::new(),
            proxy: None,
            ca_file: None,
            insecure_skip_verify: false,
            include_usage: true,
            prompt: "hi".into(),
            max_tokens: 8,
            nonce: false,
            timeouts: [None; 4],
        }
    }

    fn problems(f: &FlagTarget) -> Vec<String> {
        match Config::from_flags(f) {
            Err(ConfigError::Invalid(i)) => i.iter().map(ToString::to_string).collect(),
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn good_flags_make_one_job() {
        let mut f = flags();
        f.timeouts[1] = Some(Duration::from_millis(2500));
        f.headers = vec![("X-Team".into(), "sre".into())];
        let c = Config::from_flags(&f).expect("valid");
        assert_eq!(c.jobs.len(), 1);
        let j = &c.jobs[0];
        assert_eq!((j.model.as_str(), j.prompt.max_tokens), ("m", Some(8)));
        assert_eq!(j.timeouts.first_token, Duration::from_millis(2500));
        assert_eq!(j.target.auth, AuthStyle::Bearer);
        let mut a = flags();
        a.api = Api::AnthropicMessages;
        let c = Config::from_flags(&a).expect("valid");
        assert_eq!(
            c.jobs[0].target.auth,
            AuthStyle::XApiKey,
            "the protocol's header"
        );
    }

    #[test]
    fn the_config_rules_apply_and_name_the_flag() {
        let mut f = flags();
        f.base_url = "ftp://h/v1".into();
        f.model = " ".into();
        f.headers = vec![("Accept-Encoding".into(), "gzip".into())];
        f.proxy = Some("socks5://u:p@h".into());
        let p = problems(&f);
        for flag in ["--base-url", "--model", "--header", "--proxy"] {
            assert!(p.iter().any(|m| m.starts_with(flag)), "{flag}: {p:?}");
        }
        assert!(
            p.iter().all(|m| !m.contains("targets[")),
            "flag names, not key paths: {p:?}"
        );
        let mut k = flags();
        k.api_key_env = Some("A}B".into());
        assert!(problems(&k)[0].starts_with("--api-key-env"));
    }
}
