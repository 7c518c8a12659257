//! tokenprobe: measures what users of LLM streaming endpoints feel (TTFT, TTFO, TPOT, ITL, E2E,
//! errors) and exports it as Prometheus metrics.
//!
//! Layout, one module per concept:
//! - [`sse`]: Server-Sent Events decoder (pure).
//! - [`protocol`]: what each API's events mean, and the request bodies (pure).
//! - [`measure`]: the measurement fold from timestamped events to a [`measure::ProbeResult`] (pure).
//! - [`outcome`]: error types, flags and the classification rules (pure).
//! - [`probe`]: one streaming request, timestamped in the reading task (async I/O).
//! - [`config`]: the YAML config, validated once.
//! - [`daemon`]: the `serve` runtime: config, registry, scheduler, reload.
//! - [`metrics`]: the Prometheus registry and what a result records.
//! - [`scheduler`]: one task per job, no overlap, spread offsets.
//! - [`simulate`]: a built-in OpenAI/Anthropic streaming server with timing, faults and an event log.
//! - [`bench`]: concurrency and rate sweeps, the knee, model selection, baseline regression.
//! - [`server`]: `/metrics`, `/-/healthy`, `/-/ready`, `/-/reload`, `/`.
//! - [`report`]: a probe result as JSON or as a human report.
//! - [`resources`]: the exporter's own fd budget, fd exhaustion, and web thread priority.
//! - [`transport`]: the HTTP client, instrumented to time DNS, TCP connect and TLS.
//! - [`web`]: the bounded web server, TLS and basic auth for the endpoints (`--web.config.file`).
//!
//! `../shared/MEASUREMENT.md` in the project's workspace is the measurement contract.

pub mod bench;
pub mod config;
pub mod daemon;
pub mod measure;
pub mod metrics;
pub mod outcome;
pub mod probe;
pub mod protocol;
pub mod report;
pub mod resources;
pub mod scheduler;
pub mod server;
pub mod simulate;
pub mod sse;
pub mod transport;
pub mod web;
