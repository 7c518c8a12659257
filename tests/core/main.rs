//! In-process tests of the library and of what it parses: the stream cases replayed, the
//! fuzzers, the transport and HTTP/2 on loopback servers of the tests' own.
//!
//! One test binary (each module was its own before); `common` is shared by every binary.

#[path = "../common/mod.rs"]
mod common;

mod cases_drift;
mod fuzz;
mod http2_one_request;
mod locations;
mod replay;
mod transport;
