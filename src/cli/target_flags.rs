//! The flags that describe a target and its prompt without a config file, shared by `probe` and
//! `bench` (`--base-url`, `--api`, the key, headers, TLS, proxy, deadlines, synthetic or dataset
//! prompts): one set of flags, one conversion into the [`FlagTarget`] the config's own rules check.

use crate::config::{AuthStyle, FlagTarget, Timeouts};
use crate::protocol::Api;
use clap::ValueEnum;
use std::path::PathBuf;
use std::time::Duration;

/// A target and its prompt as flags. The command that flattens these must have a
/// `--config.file` (`config_file`): a base URL and a config file exclude each other.
#[derive(clap::Args, Debug, Clone)]
pub struct TargetFlags {
    /// Base URL, e.g. http://127.0.0.1:8080/v1 (the protocol's path is appended).
    #[arg(long, conflicts_with = "config_file")]
    pub base_url: Option<String>,
    /// API protocol.
    #[arg(long, value_enum, default_value = "openai-chat")]
    pub api: Api,
    /// Name of the environment variable holding the API key.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// File holding the API key.
    #[arg(long, conflicts_with = "api_key_env")]
    pub api_key_file: Option<PathBuf>,
    /// Do not send stream_options.include_usage (for servers that reject it).
    #[arg(long)]
    pub no_usage: bool,
    /// Ask for exactly --max-tokens (or --output-tokens) output tokens, as a target's
    /// `exact_output`: ignore_eos (vLLM, SGLang, llama.cpp), min_tokens (vLLM), none.
    #[arg(long, value_enum, default_value_t = ExactArg::None)]
    pub exact_output: ExactArg,
    /// Connection set-up deadline.
    #[arg(long, value_parser = crate::config::parse_timeout)]
    pub timeout_connect: Option<Duration>,
    /// Deadline from sending to the first token.
    #[arg(long, value_parser = crate::config::parse_timeout)]
    pub timeout_first_token: Option<Duration>,
    /// Deadline for silence after the first token.
    #[arg(long, value_parser = crate::config::parse_timeout)]
    pub timeout_idle: Option<Duration>,
    /// Deadline for the whole request.
    #[arg(long, value_parser = crate::config::parse_timeout)]
    pub timeout_total: Option<Duration>,
    /// Which header carries the key (default: x-api-key for anthropic-messages, else bearer).
    #[arg(long, value_enum)]
    pub auth: Option<AuthArg>,
    // Header, query and proxy values are checked after parsing, by us: clap's own error for a
    // bad value quotes it, and these may be secrets.
    /// Extra request header NAME=VALUE (repeatable).
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// Query parameter NAME=VALUE added to the URL (repeatable), e.g. api-version=2024-10-21.
    #[arg(long = "query")]
    pub query: Vec<String>,
    /// Proxy URL, or "none" to ignore the environment's proxy variables.
    #[arg(long)]
    pub proxy: Option<String>,
    /// Extra PEM CA certificates to trust.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate (dangerous).
    #[arg(long)]
    pub insecure_skip_verify: bool,
    /// Prepend a random nonce to the prompt so a prompt cache cannot hide prefill time.
    #[arg(long)]
    pub nonce: bool,
    /// Send filler text of this many input tokens (as the server counts them, chat template
    /// included; calibrated first) instead of --prompt.
    #[arg(long, conflicts_with_all = ["config_file", "dataset"], value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::workload::MAX_TOKENS)))]
    pub input_tokens: Option<u32>,
    /// Output length asked for: the output cap (overrides --max-tokens); the server may stop
    /// earlier unless --exact-output asks for exactly this many.
    #[arg(long, conflicts_with = "config_file", value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::workload::MAX_TOKENS)))]
    pub output_tokens: Option<u32>,
    /// Send a conversation of this dataset (ShareGPT JSON, or JSONL of message lists when the
    /// name ends in .jsonl), chosen at random, instead of --prompt.
    #[arg(long, conflicts_with = "config_file")]
    pub dataset: Option<PathBuf>,
}

/// `--auth`: the header that carries the key.
// clap shows a variant's doc comment as its help, which would change `--help`.
#[allow(missing_docs)]
#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum AuthArg {
    Bearer,
    XApiKey,
    ApiKey,
}

/// `--exact-output`, spelled as a target's `exact_output:`.
// clap shows a variant's doc comment as its help, which would change `--help`.
#[allow(missing_docs)]
#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum ExactArg {
    None,
    #[value(name = "ignore_eos")]
    IgnoreEos,
    #[value(name = "min_tokens")]
    MinTokens,
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| "expected NAME=VALUE (a value without '=' or without a name)".to_owned())
}

/// What a flag target is called in outputs: the base URL's host (`api.example.com`,
/// `127.0.0.1`), else `fallback` (a host that is not a config name, such as an IPv6 address).
pub fn target_name(base_url: &str, fallback: &str) -> String {
    url::Url::parse(base_url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .filter(|h| {
            (1..=64).contains(&h.len())
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        })
        .unwrap_or_else(|| fallback.to_owned())
}

impl TargetFlags {
    /// The first flag given that describes a target of its own (it applies only with
    /// `--base-url`): with a config file the target's settings come from the file, so such a flag
    /// would be silently dropped. The deadlines are not among them: they apply on top.
    pub fn target_only_flag(&self) -> Option<&'static str> {
        [
            (self.api_key_env.is_some(), "--api-key-env"),
            (self.api_key_file.is_some(), "--api-key-file"),
            (self.no_usage, "--no-usage"),
            (self.auth.is_some(), "--auth"),
            (!self.headers.is_empty(), "--header"),
            (!self.query.is_empty(), "--query"),
            (self.proxy.is_some(), "--proxy"),
            (self.ca_file.is_some(), "--ca-file"),
            (self.insecure_skip_verify, "--insecure-skip-verify"),
            (self.nonce, "--nonce"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// `base` with the `--timeout-*` flags that were given applied on top.
    pub fn deadlines(&self, base: Timeouts) -> Timeouts {
        Timeouts {
            connect: self.timeout_connect.unwrap_or(base.connect),
            first_token: self.timeout_first_token.unwrap_or(base.first_token),
            idle: self.timeout_idle.unwrap_or(base.idle),
            total: self.timeout_total.unwrap_or(base.total),
        }
    }

    /// The one-target config these flags describe, as the config's rules will check it: the
    /// target `name` at `base_url`, its `models`, and the user message `prompt` with the output
    /// cap `max_tokens` (unless `--input-tokens` or `--dataset` give the prompt).
    ///
    /// # Errors
    /// A `--header` or `--query` that is not `NAME=VALUE` (the value is not quoted: it may be a
    /// secret).
    pub fn flag_target(
        &self,
        name: String,
        base_url: String,
        models: Vec<String>,
        prompt: String,
        max_tokens: u32,
    ) -> Result<FlagTarget, String> {
        let pairs = |flag: &str, given: &[String]| {
            given
                .iter()
                .map(|p| parse_pair(p).map_err(|e| format!("{flag}: {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(FlagTarget {
            name,
            base_url,
            api: self.api,
            models,
            api_key_env: self.api_key_env.clone(),
            api_key_file: self.api_key_file.clone(),
            auth: self.auth.map(|s| match s {
                AuthArg::Bearer => AuthStyle::Bearer,
                AuthArg::XApiKey => AuthStyle::XApiKey,
                AuthArg::ApiKey => AuthStyle::ApiKey,
            }),
            headers: pairs("--header", &self.headers)?,
            query: pairs("--query", &self.query)?,
            proxy: self.proxy.clone(),
            ca_file: self.ca_file.clone(),
            insecure_skip_verify: self.insecure_skip_verify,
            include_usage: !self.no_usage,
            prompt,
            max_tokens,
            nonce: self.nonce,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            dataset: self.dataset.clone(),
            exact_output: match self.exact_output {
                ExactArg::None => crate::protocol::ExactOutput::None,
                ExactArg::IgnoreEos => crate::protocol::ExactOutput::IgnoreEos,
                ExactArg::MinTokens => crate::protocol::ExactOutput::MinTokens,
            },
            timeouts: [
                self.timeout_connect,
                self.timeout_first_token,
                self.timeout_idle,
                self.timeout_total,
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_target_is_named_after_its_host() {
        assert_eq!(
            target_name("http://127.0.0.1:4000/v1", "flags"),
            "127.0.0.1"
        );
        assert_eq!(
            target_name("https://openrouter.ai/api/v1", "flags"),
            "openrouter.ai"
        );
        assert_eq!(target_name("http://[::1]:8080/v1", "flags"), "flags");
        assert_eq!(target_name("not a url", "flags"), "flags");
    }
}
