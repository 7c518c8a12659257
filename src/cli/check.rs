//! `tokenprobe check-config`: validate a config file as `serve` would load it.

use crate::config::{Config, ConfigError};
use crate::exit::Exit;
use crate::output::{print_stderr_line, print_stdout};
use crate::probe::{ProbeSpec, Prober};
use anyhow::Result;

/// Validates the config at `path`: exit 0 with its jobs when valid, 2 with every problem when not.
///
/// # Errors
/// None today (problems are printed and give exit 2); the signature matches the other commands.
pub fn run(path: &std::path::Path) -> Result<Exit> {
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
                return Ok(Exit::Usage);
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
            Ok(Exit::Done)
        }
        // These name the file themselves.
        Err(e @ (ConfigError::Io { .. } | ConfigError::Syntax(_))) => {
            print_stderr_line(&e.to_string());
            Ok(Exit::Usage)
        }
        Err(e) => {
            print_stderr_line(&format!("{}: {e}", path.display()));
            Ok(Exit::Usage)
        }
    }
}
