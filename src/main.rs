//! The `tokenprobe` binary: parses the command line and runs it ([`tokenprobe::cli`] holds every
//! subcommand: `serve`, `probe`, `check-config`, `simulate` and `bench`).
//!
//! Exit codes: [`tokenprobe::exit::Exit`] lists them all.

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    tokenprobe::cli::run(tokenprobe::cli::Cli::parse())
}
