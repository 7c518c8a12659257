//! `bench --remote-write URL`: every level's results sent to a Prometheus remote-write receiver as
//! the level ends, as `tokenprobe_bench_*` series labelled with the run, model, target, prompt
//! and level, so runs plot over time next to the probe dashboards.
//!
//! - [`series`]: a level's figures as series, and the remote-write 1.0 body (pure: the
//!   `prometheus.WriteRequest` protobuf, snappy block-compressed).
//! - [`sender`]: the queue and the POSTs (I/O): a bounded queue the sweep never waits on (a
//!   full queue drops the level's batch and counts it), one POST per level through the probes'
//!   transport, retried on 5xx and 429 only, as the remote-write specification asks.

pub mod sender;
pub mod series;

pub use sender::{RemoteWrite, RemoteWriteSpec};
