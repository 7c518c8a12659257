//! The `tokenprobe` binary: parses the command line and runs it ([`tokenprobe::cli`] holds every
//! subcommand: `serve`, `probe`, `check-config`, `simulate` and `bench`).
//!
//! Exit codes: [`tokenprobe::cli`] lists them (0 success; 1 a probe failed; 2 bad usage or an
//! invalid config; 3 to 8 `bench`'s decisions).

use clap::Parser as _;
use std::process::ExitCode;

fn main() -> ExitCode {
    tokenprobe::cli::run(tokenprobe::cli::Cli::parse())
}
