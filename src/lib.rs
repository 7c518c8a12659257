//! tokenprobe: measures what users of LLM streaming endpoints feel (TTFT, TTFO, TPOT, ITL, E2E,
//! errors) and exports it as Prometheus metrics.
//!
//! Layout, one module per concept:
//! - [`sse`]: Server-Sent Events decoder (pure).
//! - [`protocol`]: what each API's events mean, and the request bodies (pure).
//! - [`log`]: the log line format (logfmt or JSON, one event per line).
//! - [`measure`]: the measurement fold from timestamped events to a [`measure::ProbeResult`] (pure).
//! - [`outcome`]: error types, flags and the classification rules (pure).
//! - [`ratelimit`]: the quotas an answer's rate-limit headers state (pure).
//! - [`plausible`]: what a number another server states must be to be data (pure).
//! - [`probe`]: one streaming request, timestamped in the reading task (async I/O).
//! - [`auth`]: API keys, where they come from, the header that carries them.
//! - [`config`]: the YAML config, validated once.
//! - [`files`]: reading the files a config names, bounded in time and size.
//! - [`daemon`]: the `serve` runtime: config, registry, scheduler, reload.
//! - [`metrics`]: the Prometheus registry and what a result records.
//! - [`scheduler`]: one task per job, no overlap, spread offsets.
//! - [`simulate`]: a built-in OpenAI/Anthropic streaming server with timing, faults and an event log.
//! - [`cli`]: the subcommands' flags and their conversion into validated plans.
//! - [`bench`]: concurrency and rate sweeps, the knee, model selection, baseline regression (the
//!   measuring half: a typed report).
//! - [`history`]: the run store: every bench run kept, listed, trended, and a baseline.
//! - [`render`]: the bench report as a table, Markdown, CSV, JSON, HTML and SVG (the rendering
//!   half).
//! - [`endpoints`]: the exporter's `/metrics`, `/-/healthy`, `/-/ready`, `/-/reload`, `/`.
//! - [`remotewrite`]: bench levels sent to a Prometheus remote-write receiver as they end.
//! - [`redact`]: what a secret is, and hiding it (and its derived forms) in every output.
//! - [`otlp`]: `serve`'s OTLP/HTTP metrics export with the OpenTelemetry GenAI names.
//! - [`output`]: writing to stdout and stderr without panicking on a closed pipe.
//! - [`units`]: how numbers are written for people (seconds, costs, plain numbers).
//! - [`stop`]: the stop signals of the long-running commands.
//! - [`tokenizer`]: a target's `tokenizer.json`, checked and counting filler tokens.
//! - [`resources`]: the exporter's own fd budget, fd exhaustion, and web thread priority.
//! - `rng`: the one seeded pseudo-random generator (simulator jitter, bench arrivals).
//! - [`transport`]: the HTTP client, instrumented to time DNS, TCP connect and TLS.
//! - [`web`]: the bounded web server, TLS and basic auth for the endpoints (`--web.config.file`).
//! - [`workload`]: what a probe sends: messages, synthetic lengths, datasets, conversations (pure).
//!
//! `docs/measurement.md` is the measurement contract, in the project's own words.

pub mod auth;
pub mod bench;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod endpoints;
pub mod exit;
pub mod files;
pub mod history;
pub mod kstamp;
pub mod log;
pub mod measure;
pub mod metrics;
pub mod otlp;
pub mod outcome;
pub mod output;
pub mod plausible;
pub mod probe;
pub mod protocol;
pub mod ratelimit;
pub mod redact;
pub mod remotewrite;
pub mod render;
pub mod resources;
pub(crate) mod rng;
pub mod scheduler;
pub mod servermetrics;
pub mod simulate;
pub mod sse;
pub mod stop;
pub mod tokenizer;
pub mod transport;
pub mod units;
pub mod web;
pub mod workload;
