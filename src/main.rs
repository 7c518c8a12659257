//! The `tokenprobe` binary: parses the command line and runs it ([`tokenprobe::cli`] holds every
//! subcommand: `serve`, `probe`, `check-config`, `simulate` and `bench`).
//!
//! Exit codes: 0 success; 1 a probe failed (`probe`); 2 bad usage or an invalid config; 3 a bench
//! regressed against its baseline.

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    tokenprobe::cli::run(tokenprobe::cli::Cli::parse())
}
