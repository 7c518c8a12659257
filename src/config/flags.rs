//! A target, model and prompt given on the command line (`tokenprobe probe --base-url ...`),
//! validated by the very rules of a config file: the flags become the raw config a file would
//! give and go through [`super::validate`], and the files they name through the same checks as
//! [`Config::load`]'s. A problem names the flag it came from instead of a key path.

use super::raw::{
    RawConfig, RawDataset, RawLength, RawPrompt, RawSynthetic, RawTarget, RawTimeouts, S,
};
use super::types::{AuthStyle, Config, ConfigError, ConnectionMode, Issue};
use crate::protocol::{Api, Message};
use crate::workload::{DatasetFormat, Order};
use serde_saphyr::{Location, Spanned};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// What the `probe` or `bench` command's flags say about one target, its models and one prompt.
#[derive(Debug, Clone)]
pub struct FlagTarget {
    /// The target's name in outputs.
    pub name: String,
    /// `--base-url`.
    pub base_url: String,
    /// `--api`.
    pub api: Api,
    /// `--model` (`probe`), `--models` (`bench`).
    pub models: Vec<String>,
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
    /// `--input-tokens`: a synthetic prompt of this many input tokens instead of `--prompt`.
    pub input_tokens: Option<u32>,
    /// `--output-tokens`: the synthetic prompt's output length (else `--max-tokens`).
    pub output_tokens: Option<u32>,
    /// `--dataset`: a conversation of this file (ShareGPT JSON; JSONL when it ends in `.jsonl`)
    /// instead of `--prompt`.
    pub dataset: Option<PathBuf>,
    /// `--exact-output`: how the request asks for exactly its output cap.
    pub exact_output: crate::protocol::ExactOutput,
    /// `--timeout-connect`, `--timeout-first-token`, `--timeout-idle`, `--timeout-total`.
    pub timeouts: [Option<Duration>; 4],
}

/// The name of the one prompt the flags describe.
const NAME: &str = "flags";

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
        "synthetic" => match path.rsplit('.').next() {
            Some("output_tokens") => "--output-tokens",
            _ => "--input-tokens",
        },
        "dataset" => "--dataset",
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
    /// The one prompt: `--input-tokens` (synthetic), `--dataset`, or `--prompt`.
    fn raw_prompt(&self) -> RawPrompt {
        let cap = self.output_tokens.unwrap_or(self.max_tokens);
        let mut p = RawPrompt {
            name: at(NAME.to_owned()),
            messages: Vec::new(),
            max_tokens: None,
            nonce: self.nonce,
            expect: None,
            stream: None,
            synthetic: None,
            dataset: None,
            conversation: None,
            trace: None,
            drift: None,
            session: None,
        };
        if let Some(n) = self.input_tokens {
            p.synthetic = Some(at(RawSynthetic {
                input_tokens: Some(at(RawLength::Fixed(u64::from(n)))),
                output_tokens: Some(at(RawLength::Fixed(u64::from(cap)))),
                shared_prefix_tokens: None,
                seed: None,
            }));
        } else if let Some(f) = &self.dataset {
            let jsonl = f
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("jsonl"));
            p.dataset = Some(at(RawDataset {
                file: at(f.display().to_string()),
                format: if jsonl {
                    DatasetFormat::Jsonl
                } else {
                    DatasetFormat::Sharegpt
                },
                order: Order::Random,
                seed: None,
            }));
            p.max_tokens = Some(cap);
        } else {
            p.messages = vec![Message {
                role: "user".into(),
                content: self.prompt.clone(),
                ..Default::default()
            }];
            p.max_tokens = Some(cap);
        }
        p
    }

    /// The raw config a file with this target, model and prompt would give.
    fn raw(&self) -> RawConfig {
        let secs = |d: Option<Duration>| d.map(|d| at(humantime::format_duration(d).to_string()));
        let [connect, first_token, idle, total] = self.timeouts;
        RawConfig {
            defaults: None,
            prompts: vec![self.raw_prompt()],
            targets: vec![RawTarget {
                name: at(self.name.clone()),
                base_url: at(self.base_url.clone()),
                api: self.api,
                // The config's own `${VAR}` expansion reads the variable.
                api_key: self.api_key_env.as_ref().map(|v| at(format!("${{{v}}}"))),
                api_key_file: self
                    .api_key_file
                    .as_ref()
                    .map(|p| at(p.display().to_string())),
                models: at(self.models.clone()),
                prompts: None,
                interval: None,
                cron: None,
                histograms: None,
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
                max_in_flight: None,
                cold_after: None,
                price: None,
                model_prices: BTreeMap::new(),
                gpus: None,
                gpu_hour_price: None,
                stream: true,
                exact_output: self.exact_output,
                tokenizer: None,
                server_metrics: Vec::new(),
                model_aliases: None,
                model_mismatch: crate::config::types::MismatchAction::Flag,
                usage_audit: None,
            }],
            buckets: None,
            location: None,
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
            name: "probe".into(),
            base_url: "http://127.0.0.1:8080/v1".into(),
            api: Api::OpenaiChat,
            models: vec!["m".into()],
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
            input_tokens: None,
            output_tokens: None,
            exact_output: crate::protocol::ExactOutput::None,
            dataset: None,
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

    /// `--input-tokens` makes a synthetic prompt (`--output-tokens`, else `--max-tokens`, its
    /// output length), `--dataset` a dataset prompt read as `load` reads it; their problems
    /// name the flag.
    #[test]
    fn input_tokens_and_dataset_make_their_prompts() {
        use crate::workload::{DatasetFormat, Length, Workload};
        let mut f = flags();
        f.input_tokens = Some(512);
        let c = Config::from_flags(&f).expect("valid");
        let Workload::Synthetic(s) = &c.jobs[0].prompt.workload else {
            panic!("{:?}", c.jobs[0].prompt.workload)
        };
        assert_eq!(
            (s.input_tokens, s.output_tokens),
            (Length::Fixed(512), Length::Fixed(8))
        );
        assert_eq!(c.jobs[0].prompt.max_tokens, None);
        f.output_tokens = Some(3);
        let c = Config::from_flags(&f).expect("valid");
        let Workload::Synthetic(s) = &c.jobs[0].prompt.workload else {
            panic!()
        };
        assert_eq!(s.output_tokens, Length::Fixed(3));
        f.input_tokens = Some(0);
        assert!(
            problems(&f)[0].starts_with("--input-tokens"),
            "{:?}",
            problems(&f)
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("d.jsonl");
        std::fs::write(&file, "[{\"role\": \"user\", \"content\": \"hi\"}]\n").unwrap();
        let mut d = flags();
        d.dataset = Some(file);
        let c = Config::from_flags(&d).expect("valid");
        let Workload::Dataset(ds) = &c.jobs[0].prompt.workload else {
            panic!()
        };
        assert_eq!(
            (ds.format, ds.entries.get().map(Vec::len)),
            (DatasetFormat::Jsonl, Some(1))
        );
        assert_eq!(c.jobs[0].prompt.max_tokens, Some(8));
        d.dataset = Some(dir.path().join("none.json"));
        let p = problems(&d);
        assert!(p[0].starts_with("--dataset: cannot read dataset"), "{p:?}");
    }

    #[test]
    fn the_config_rules_apply_and_name_the_flag() {
        let mut f = flags();
        f.base_url = "ftp://h/v1".into();
        f.models = vec![" ".into()];
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
