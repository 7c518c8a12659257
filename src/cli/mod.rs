//! The command line as a library: each subcommand's flags and their conversion into the validated
//! plan the rest of the crate runs, unit-tested without spawning the binary. `main.rs` only parses
//! and dispatches.

pub mod bench;
