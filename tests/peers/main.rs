//! Real peers: llama.cpp with a small real model, Prometheus and promtool, llmock, GuideLLM, the
//! dashboards and deploy checks, and the demo script.
//!
//! One test binary (each module was its own before); `common` is shared by every binary.

#[path = "../common/mod.rs"]
mod common;

mod dashboard_queries;
mod demo;
mod deploy_checks;
mod guidellm;
mod llmock;
mod prometheus_e2e;
mod real_server;
mod workloads;
