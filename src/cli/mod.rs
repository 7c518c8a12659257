//! The command line as a library: each subcommand's flags and their conversion into the validated
//! plan the rest of the crate runs, unit-tested without spawning the binary. `main.rs` only parses
//! and calls [`run`].
//!
//! - [`probe`]: `probe`'s flags → a [`crate::probe::ProbeSpec`], the report.
//! - [`serve`]: `serve`'s flags and the exporter's process (runtimes, web server, reload, shutdown).
//! - [`check`]: the `check-config` command.
//! - [`bench`]: `bench`'s flags → a [`crate::bench::plan::BenchPlan`], run and rendered;
//!   [`bench_servermetrics`]: its server-metrics flags; [`bench_report`]: `bench report` (earlier
//!   runs rendered again) and the `bench` command line holding either; [`bench_history`]: the run
//!   store's flags, `--baseline last`, and `bench history`; [`bench_export`]: `--remote-write`.
//!
//! `simulate`'s flags are [`crate::simulate::SimulateArgs`], beside the simulator they configure.
//!
//! Every command returns its [`Exit`], made the process's exit status once, in [`run`]:
//! [`crate::exit`] lists them all.

pub mod bench;
pub mod bench_export;
pub mod bench_history;
pub mod bench_report;
pub mod bench_servermetrics;
pub mod check;
pub mod probe;
pub mod serve;
pub mod target_flags;

use crate::exit::Exit;
use crate::log::LogFormat;
use crate::output::print_stderr_line;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// The whole command line: global flags and one subcommand.
#[derive(Parser, Debug)]
#[command(
    name = "tokenprobe",
    version,
    about = "Measures LLM streaming endpoints as users feel them (TTFT, TPOT, errors) and exports Prometheus metrics"
)]
pub struct Cli {
    /// Log level: error, warn, info, debug, trace (or a tracing filter).
    #[arg(
        long = "log.level",
        global = true,
        default_value = "info",
        env = "TOKENPROBE_LOG",
        value_parser = parse_log_level
    )]
    pub log_level: String,
    /// Log format.
    #[arg(long = "log.format", global = true, value_enum, default_value_t = LogFormat::Logfmt)]
    pub log_format: LogFormat,
    /// The subcommand.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Probe the configured jobs on their schedules and serve /metrics.
    Serve(serve::ServeArgs),
    /// Send one streaming request and report what it measured.
    Probe(probe::ProbeArgs),
    /// Validate a config file: exit 0 when valid, 2 with every problem listed when not.
    CheckConfig {
        /// The YAML config file.
        #[arg(long = "config.file")]
        config_file: PathBuf,
    },
    /// Serve a simulated OpenAI-compatible and Anthropic streaming API with configured timing and faults.
    Simulate(crate::simulate::SimulateArgs),
    /// Load-test: step concurrency (or an arrival rate) up per model; find the knee, rank models, compare with a baseline.
    Bench(Box<bench::BenchArgs>),
}

fn parse_log_level(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(s).map_err(|e| e.to_string())?;
    Ok(s.to_owned())
}

/// Runs a parsed command line; the process's exit code.
pub fn run(cli: Cli) -> ExitCode {
    crate::log::init(&cli.log_level, cli.log_format);
    let cmd = match cli.cmd {
        Cmd::Serve(args) => return serve::run(args).into(),
        other => other,
    };
    // One probe runs on one thread: its connection task and its reader then hand each body frame
    // over without a cross-thread wake-up (a 16 MiB event is 2,048 frames of 8 KiB).
    let builder = match cmd {
        Cmd::Probe(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let rt = match { builder }.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            print_stderr_line(&format!("tokenprobe: cannot start the runtime: {e}"));
            return Exit::Usage.into();
        }
    };
    let result = rt.block_on(async {
        match cmd {
            Cmd::Serve(_) => Ok(Exit::Usage), // handled above, on its own runtimes
            Cmd::Probe(args) => probe::run(args).await,
            Cmd::CheckConfig { config_file } => check::run(&config_file),
            Cmd::Simulate(args) => crate::simulate::run(args).await,
            Cmd::Bench(args) => match &args.action {
                Some(bench::BenchAction::Merge(m)) => m.run().map_err(Into::into),
                Some(bench::BenchAction::Report(r)) => bench_report::run(r).map_err(Into::into),
                Some(bench::BenchAction::History(h)) => bench_history::run(h).map_err(Into::into),
                None => args.run().await.map_err(Into::into),
            },
        }
    });
    match result {
        Ok(exit) => exit.into(),
        Err(e) => {
            print_stderr_line(&format!("tokenprobe: {e:#}"));
            e.downcast_ref::<Refused>()
                .map_or(Exit::Usage, |r| r.exit)
                .into()
        }
    }
}

/// A command that ran and refused to go on, with its exit (not [`Exit::Usage`], bad usage): the
/// probe's calibration failing ([`Exit::Failed`]) is one. Its message is printed like every
/// error's.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Refused {
    /// The process's exit.
    pub exit: Exit,
    /// Why, in words.
    pub message: String,
}
