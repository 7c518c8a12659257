//! The `tokenprobe` command line: `serve`, `probe`, `check-config`, `simulate` and `bench`.
//!
//! Exit codes: 0 success; 1 a probe failed (`probe`); 2 bad usage or an invalid config.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokenprobe::config::{
    AuthStyle, Config, ConfigError, ConnectionMode, KeySource, ProxySetting, Secret, Timeouts,
    TlsOptions,
};
use tokenprobe::daemon::Daemon;
use tokenprobe::probe::{ProbeSpec, Prober};
use tokenprobe::protocol::{Api, Message};
use tokenprobe::report::{ReportContext, print_stderr_line, print_stdout, to_json, to_text};
use tokenprobe::server::router;
use tokenprobe::transport::ClientOptions;
use tokenprobe::web::{Limits, WebConfig};

#[derive(Parser, Debug)]
#[command(
    name = "tokenprobe",
    version,
    about = "Measures LLM streaming endpoints as users feel them (TTFT, TPOT, errors) and exports Prometheus metrics"
)]
struct Cli {
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(
        long = "log.level",
        global = true,
        default_value = "info",
        env = "TOKENPROBE_LOG",
        value_parser = parse_log_level
    )]
    log_level: String,
    /// Log format.
    #[arg(long = "log.format", global = true, value_enum, default_value_t = LogFormat::Logfmt)]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LogFormat {
    Logfmt,
    Json,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Probe the configured jobs on their schedules and serve /metrics.
    Serve {
        /// The YAML config file.
        #[arg(long = "config.file", default_value = "tokenprobe.yml")]
        config_file: PathBuf,
        /// Address to listen on for /metrics and the other endpoints.
        #[arg(long = "web.listen-address", default_value = "127.0.0.1:9464")]
        listen: String,
        /// How long in-flight probes may run after SIGTERM/SIGINT.
        #[arg(long = "shutdown.grace", default_value = "10s", value_parser = humantime::parse_duration)]
        grace: Duration,
        /// TLS and basic auth for the endpoints (Prometheus exporter-toolkit format).
        #[arg(long = "web.config.file")]
        web_config: Option<PathBuf>,
    },
    /// Send one streaming request and report what it measured.
    Probe(ProbeArgs),
    /// Validate a config file: exit 0 when valid, 2 with every problem listed when not.
    CheckConfig {
        /// The YAML config file.
        #[arg(long = "config.file")]
        config_file: PathBuf,
    },
    /// Serve a simulated OpenAI-compatible and Anthropic streaming API with configured timing and faults.
    Simulate(tokenprobe::simulate::SimulateArgs),
    /// Load-test: step concurrency (or an arrival rate) up per model; find the knee, rank models, compare with a baseline.
    Bench(Box<tokenprobe::cli::bench::BenchArgs>),
}

#[derive(clap::Args, Debug)]
struct ProbeArgs {
    /// Base URL, e.g. http://127.0.0.1:8080/v1 (the protocol's path is appended).
    #[arg(
        long,
        required_unless_present = "config_file",
        conflicts_with = "config_file"
    )]
    base_url: Option<String>,
    /// Model name to ask for.
    #[arg(long, required_unless_present = "config_file")]
    model: Option<String>,
    /// API protocol.
    #[arg(long, value_enum, default_value = "openai-chat")]
    api: Api,
    /// Name of the environment variable holding the API key.
    #[arg(long)]
    api_key_env: Option<String>,
    /// File holding the API key.
    #[arg(long, conflicts_with = "api_key_env")]
    api_key_file: Option<PathBuf>,
    /// The user message.
    #[arg(long, default_value = "Say hello in five words.")]
    prompt: String,
    /// Output cap (max_tokens, at least 1).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: u32,
    /// Do not send stream_options.include_usage (for servers that reject it).
    #[arg(long)]
    no_usage: bool,
    /// Connection set-up deadline.
    #[arg(long, value_parser = tokenprobe::config::parse_timeout)]
    timeout_connect: Option<Duration>,
    /// Deadline from sending to the first token.
    #[arg(long, value_parser = tokenprobe::config::parse_timeout)]
    timeout_first_token: Option<Duration>,
    /// Deadline for silence after the first token.
    #[arg(long, value_parser = tokenprobe::config::parse_timeout)]
    timeout_idle: Option<Duration>,
    /// Deadline for the whole request.
    #[arg(long, value_parser = tokenprobe::config::parse_timeout)]
    timeout_total: Option<Duration>,
    /// Which header carries the key (default: x-api-key for anthropic-messages, else bearer).
    #[arg(long, value_enum)]
    auth: Option<AuthArg>,
    // Header, query and proxy values are checked after parsing, by us: clap's own error for a
    // bad value quotes it, and these may be secrets.
    /// Extra request header NAME=VALUE (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Query parameter NAME=VALUE added to the URL (repeatable), e.g. api-version=2024-10-21.
    #[arg(long = "query")]
    query: Vec<String>,
    /// Proxy URL, or "none" to ignore the environment's proxy variables.
    #[arg(long)]
    proxy: Option<String>,
    /// Extra PEM CA certificates to trust.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Accept any server certificate (dangerous).
    #[arg(long)]
    insecure_skip_verify: bool,
    /// Prepend a random nonce to the prompt so a prompt cache cannot hide prefill time.
    #[arg(long)]
    nonce: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Probe a target of this config file instead of --base-url (with --target).
    #[arg(long = "config.file")]
    config_file: Option<PathBuf>,
    /// Target name in the config file (its first model and prompt, unless --model is given).
    #[arg(long, requires = "config_file")]
    target: Option<String>,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum AuthArg {
    Bearer,
    XApiKey,
    ApiKey,
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| "expected NAME=VALUE (a value without '=' or without a name)".to_owned())
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = parse_pair(s)?;
    reqwest::header::HeaderName::from_bytes(k.as_bytes())
        .map_err(|_| format!("{k:?} is not a valid header name"))?;
    reqwest::header::HeaderValue::from_str(&v)
        .map_err(|_| format!("the value of {k} is not a valid header value"))?;
    Ok((k, v))
}

fn parse_log_level(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

fn parse_proxy(s: &str) -> Result<ProxySetting, String> {
    if s == "none" || s.is_empty() {
        return Ok(ProxySetting::Disabled);
    }
    match reqwest::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(ProxySetting::Url(s.to_owned())),
        _ => Err("--proxy: expected an http:// or https:// proxy URL, or \"none\"".into()),
    }
}

fn init_logging(level: &str, format: LogFormat) {
    tokenprobe::log::init(
        level,
        match format {
            LogFormat::Json => tokenprobe::log::LogFormat::Json,
            LogFormat::Logfmt => tokenprobe::log::LogFormat::Logfmt,
        },
    );
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log_level, cli.log_format);
    let cmd = match cli.cmd {
        Cmd::Serve {
            config_file,
            listen,
            grace,
            web_config,
        } => return serve_main(config_file, listen, grace, web_config),
        other => other,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            print_stderr_line(&format!("tokenprobe: cannot start the runtime: {e}"));
            return ExitCode::from(2);
        }
    };
    let result = rt.block_on(async {
        match cmd {
            Cmd::Serve { .. } => unreachable!("handled by serve_main"),
            Cmd::Probe(args) => probe(args).await,
            Cmd::CheckConfig { config_file } => check_config(&config_file),
            Cmd::Simulate(args) => tokenprobe::simulate::run(args).await,
            Cmd::Bench(args) => match args.plan() {
                Ok(plan) => tokenprobe::bench::run(plan).await.map_err(Into::into),
                Err(e) => Err(e.into()),
            },
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            print_stderr_line(&format!("tokenprobe: {e:#}"));
            ExitCode::from(2)
        }
    }
}

fn check_config(path: &std::path::Path) -> Result<ExitCode> {
    match Config::load(path) {
        Ok(c) => {
            // What `serve` does next with a valid config: build each job's client.
            let unusable: Vec<String> = c
                .jobs
                .iter()
                .filter_map(|j| {
                    Prober::new(&ProbeSpec::from_job(j))
                        .err()
                        .map(|e| format!("  {}: {e}", j.name()))
                })
                .collect();
            if !unusable.is_empty() {
                print_stderr_line(&format!(
                    "{}: invalid config ({} job{} cannot start):\n{}",
                    path.display(),
                    unusable.len(),
                    if unusable.len() == 1 { "" } else { "s" },
                    unusable.join("\n")
                ));
                return Ok(ExitCode::from(2));
            }
            print_stdout(&format!(
                "{}: valid, {} jobs\n",
                path.display(),
                c.jobs.len()
            ));
            for j in &c.jobs {
                print_stdout(&format!(
                    "  {} ({}, {})\n",
                    j.name(),
                    j.target.api,
                    j.schedule
                ));
            }
            Ok(ExitCode::SUCCESS)
        }
        // These name the file themselves.
        Err(e @ (ConfigError::Io { .. } | ConfigError::Syntax(_))) => {
            print_stderr_line(&e.to_string());
            Ok(ExitCode::from(2))
        }
        Err(e) => {
            print_stderr_line(&format!("{}: {e}", path.display()));
            Ok(ExitCode::from(2))
        }
    }
}

/// `serve` runs on two runtimes: probes on their own (every core), everything else (the web
/// endpoints, bcrypt, reloads, signals) on one worker thread at a lower CPU priority, so no scrape
/// or login can delay a probe's timestamps (issue 9, item 5).
fn serve_main(
    config_file: PathBuf,
    listen: String,
    grace: Duration,
    web_config: Option<PathBuf>,
) -> ExitCode {
    let nofile = tokenprobe::resources::raise_fd_limit();
    let probing = tokio::runtime::Builder::new_multi_thread()
        .thread_name("tokenprobe-probe")
        .enable_all()
        .build();
    let web = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tokenprobe-web")
        .on_thread_start(|| tokenprobe::resources::lower_thread_priority(10))
        .enable_all()
        .build();
    let (probing, web) = match (probing, web) {
        (Ok(p), Ok(w)) => (p, w),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("tokenprobe: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let handle = probing.handle().clone();
    let task = web.spawn(serve(
        config_file,
        listen,
        grace,
        web_config,
        handle,
        nofile,
    ));
    let result = web
        .block_on(task)
        .unwrap_or_else(|e| Err(anyhow::anyhow!("serve task failed: {e}")));
    // The grace period is over: whatever still runs (a probe past it) is dropped, not waited for.
    probing.shutdown_timeout(Duration::from_millis(200));
    web.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tokenprobe: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn serve(
    config_file: PathBuf,
    listen: String,
    grace: Duration,
    web_config: Option<PathBuf>,
    probing: tokio::runtime::Handle,
    nofile: Option<u64>,
) -> Result<ExitCode> {
    // Signal handlers first: a SIGTERM or SIGHUP that arrives while the first probes start must
    // not meet the default action (which ends the process at once).
    let stop_signals = StopSignals::install();
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    let web = match &web_config {
        Some(p) => WebConfig::load(p)?,
        None => WebConfig::default(),
    };
    let daemon = Daemon::start(&config_file, probing)
        .with_context(|| format!("loading {}", config_file.display()))?;
    let listener = std::net::TcpListener::bind(&listen)
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr().context("listener address")?;
    #[cfg(unix)]
    spawn_sighup_reloader(daemon.clone(), hup);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(stop_signals.watch(stop.clone()));
    let limits = Limits {
        max_connections: tokenprobe::resources::web_connection_limit(nofile),
        ..Limits::default()
    };
    tracing::info!(
        address = %addr,
        tls = web.tls.is_some(),
        basic_auth = !web.users.is_empty(),
        jobs = daemon.jobs().len(),
        config = %config_file.display(),
        max_web_connections = limits.max_connections,
        fd_limit = nofile,
        "tokenprobe serving"
    );
    let app = router(daemon.clone());
    let stopped = stop.clone();
    let mut web_task = tokio::spawn(async move {
        tokenprobe::web::serve(
            listener,
            app,
            &web,
            limits,
            async move { stopped.cancelled().await },
            grace,
        )
        .await
    });
    // `biased`: when the stop signal has come, the web server (which stops on the same signal and
    // may already be done) must not be taken for one that ended by itself, or the process would
    // exit without waiting for the probes in flight.
    let mut web_ended = None;
    tokio::select! {
        biased;
        () = stop.cancelled() => {}
        r = &mut web_task => {
            if !stop.is_cancelled() {
                // The web server only ends by itself on an error (an unusable certificate).
                r.context("HTTP server")?.context("HTTP server")?;
                return Ok(ExitCode::SUCCESS);
            }
            web_ended = Some(r);
        }
    }
    // One deadline for everything: in-flight probes and open web connections both get `grace`.
    tracing::info!(grace = %humantime::format_duration(grace), "shutting down: waiting for in-flight probes and web connections");
    let deadline = tokio::time::Instant::now() + grace;
    let web_done = async move {
        match web_ended {
            Some(r) => Ok(r),
            None => tokio::time::timeout_at(deadline, web_task).await,
        }
    };
    let (probes_done, web_done) = tokio::join!(daemon.shutdown(grace), web_done);
    if !probes_done {
        tracing::warn!("in-flight probes did not finish within the grace period");
    }
    if let Ok(Ok(Err(e))) = web_done {
        tracing::warn!(error = %e, "HTTP server");
    }
    Ok(ExitCode::SUCCESS)
}

/// SIGHUP reloads the config, as Prometheus and its exporters do.
#[cfg(unix)]
fn spawn_sighup_reloader(daemon: Arc<Daemon>, hup: std::io::Result<tokio::signal::unix::Signal>) {
    tokio::spawn(async move {
        let mut hup = match hup {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGHUP; reload with POST /-/reload");
                return;
            }
        };
        while hup.recv().await.is_some() {
            let _ = daemon.reload().await;
        }
    });
}

/// The stop signals, listened to from the moment they are installed.
struct StopSignals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Installs the handlers of SIGTERM and SIGINT now (within a runtime).
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::error!(error = %e, signal = name, "cannot listen for the signal");
                    None
                }
            };
            StopSignals {
                term: listen(SignalKind::terminate(), "SIGTERM"),
                int: listen(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// The first SIGTERM or SIGINT cancels `stop` (graceful shutdown within `--shutdown.grace`); a
    /// second one exits at once with status 1.
    async fn watch(self, stop: tokio_util::sync::CancellationToken) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::Signal;
            async fn recv(s: &mut Option<Signal>) {
                let got = match s {
                    Some(s) => s.recv().await.is_some(),
                    None => false,
                };
                if !got {
                    std::future::pending::<()>().await;
                }
            }
            let (mut term, mut int) = (self.term, self.int);
            tokio::select! {
                () = recv(&mut term) => {}
                () = recv(&mut int) => {}
            }
            stop.cancel();
            tokio::select! {
                () = recv(&mut term) => {}
                () = recv(&mut int) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            stop.cancel();
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::warn!("second stop signal: exiting now");
        std::process::exit(1);
    }
}

/// `base` with the `--timeout-*` flags that were given applied on top.
fn deadlines(a: &ProbeArgs, base: Timeouts) -> Timeouts {
    Timeouts {
        connect: a.timeout_connect.unwrap_or(base.connect),
        first_token: a.timeout_first_token.unwrap_or(base.first_token),
        idle: a.timeout_idle.unwrap_or(base.idle),
        total: a.timeout_total.unwrap_or(base.total),
    }
}

fn spec_from_args(a: &ProbeArgs) -> Result<ProbeSpec> {
    if let Some(cfg) = &a.config_file {
        let config = Config::load(cfg).map_err(|e| match e {
            e @ (ConfigError::Io { .. } | ConfigError::Syntax(_)) => anyhow::anyhow!("{e}"),
            e => anyhow::anyhow!("{}: {e}", cfg.display()),
        })?;
        return job_spec(&config, cfg, a.target.as_deref(), a.model.as_deref());
    }
    let (Some(base_url), Some(model)) = (&a.base_url, &a.model) else {
        anyhow::bail!("--base-url and --model are required without --config.file");
    };
    anyhow::ensure!(!model.trim().is_empty(), "--model must not be empty");
    // The URL is not quoted: it may carry userinfo.
    let parsed = reqwest::Url::parse(base_url).context("--base-url is not a URL")?;
    anyhow::ensure!(
        matches!(parsed.scheme(), "http" | "https"),
        "--base-url must be http:// or https://"
    );
    let api_key = match (&a.api_key_env, &a.api_key_file) {
        (Some(var), _) => Some(KeySource::Inline(Secret::new(std::env::var(var).map_err(
            |_| anyhow::anyhow!("environment variable {var} (--api-key-env) is not set"),
        )?))),
        (None, Some(f)) => {
            std::fs::metadata(f).with_context(|| format!("--api-key-file {}", f.display()))?;
            Some(KeySource::File(f.clone()))
        }
        (None, None) => None,
    };
    let timeouts = deadlines(a, Timeouts::default());
    let auth = match (a.auth, a.api) {
        (Some(AuthArg::Bearer), _) => AuthStyle::Bearer,
        (Some(AuthArg::XApiKey), _) | (None, Api::AnthropicMessages) => AuthStyle::XApiKey,
        (Some(AuthArg::ApiKey), _) => AuthStyle::ApiKey,
        (None, _) => AuthStyle::Bearer,
    };
    let proxy = match a.proxy.as_deref() {
        None => ProxySetting::Environment,
        Some(p) => parse_proxy(p).map_err(anyhow::Error::msg)?,
    };
    let headers = a
        .headers
        .iter()
        .map(|h| parse_header(h).map_err(|e| anyhow::anyhow!("--header: {e}")))
        .collect::<Result<Vec<_>>>()?;
    if let Some(why) = tokenprobe::config::userinfo_conflict(base_url, auth, api_key.is_some()) {
        anyhow::bail!("--base-url {why}");
    }
    if let Some(why) = headers
        .iter()
        .find_map(|(n, _)| tokenprobe::config::header_set_by_tokenprobe(n, auth, api_key.is_some()))
    {
        anyhow::bail!("--header: {why}");
    }
    let query = a
        .query
        .iter()
        .map(|q| parse_pair(q).map_err(|e| anyhow::anyhow!("--query: {e}")))
        .collect::<Result<Vec<_>>>()?;
    Ok(ProbeSpec {
        api: a.api,
        base_url: base_url.trim_end_matches('/').to_owned(),
        model: model.clone(),
        messages: vec![Message {
            role: "user".into(),
            content: a.prompt.clone(),
        }],
        max_tokens: Some(a.max_tokens),
        include_usage: !a.no_usage,
        headers,
        extra_body: serde_json::Map::new(),
        api_key,
        auth,
        query,
        nonce: a.nonce,
        expect: None,
        timeouts,
        client: ClientOptions {
            proxy,
            tls: TlsOptions {
                ca_file: a.ca_file.clone(),
                insecure_skip_verify: a.insecure_skip_verify,
            },
            connection: ConnectionMode::New,
        },
    })
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

async fn probe(a: ProbeArgs) -> Result<ExitCode> {
    let mut spec = spec_from_args(&a)?;
    if a.config_file.is_some() {
        // Deadline flags still apply on top of a configured target.
        spec.timeouts = deadlines(&a, spec.timeouts);
    }
    if spec.client.tls.insecure_skip_verify {
        print_stderr_line(
            "tokenprobe: WARNING: --insecure-skip-verify: the server certificate is NOT verified",
        );
    }
    let prober = Prober::new(&spec)?;
    let result = prober.run(&spec).await;
    match a.format {
        Format::Json => {
            print_stdout(&format!("{}\n", to_json(&result)));
            if let Some(e) = result.error_type {
                print_stderr_line(&format!(
                    "tokenprobe: probe failed: {e} (HTTP {}): {}",
                    result.http_status.map_or("-".into(), |s| s.to_string()),
                    result.error_detail.as_deref().unwrap_or("")
                ));
            }
        }
        Format::Text => print_stdout(&to_text(
            &result,
            &ReportContext {
                url: tokenprobe::redact::redact_url(&spec.url()),
                model: spec.model.clone(),
                proxy: spec.proxy(),
            },
        )),
    }
    Ok(if result.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
