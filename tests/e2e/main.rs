//! `tokenprobe` as a process (probe, serve, bench, simulate, check-config) against the built-in
//! simulator and the replay server, on loopback with ephemeral ports; the README's commands and
//! figures.
//!
//! One test binary (each module was its own before); `common` is shared by every binary.

#[path = "../common/mod.rs"]
mod common;

mod bench;
mod bench_html;
mod cli_checks;
mod config_examples;
mod non_stream;
mod otlp_export;
mod probe_report;
mod readme_commands;
mod readme_figures;
mod requests;
mod secrets;
mod serve_lifecycle;
mod server_metrics;
mod sessions;
mod simulate;
mod simulate_models;
mod web_hardening;
mod what_answered;
