//! The integration tests of this crate, in one binary: each module is one
//! area (its own doc comment says what it covers). One binary instead of one
//! per file links the cluster, the transport and TLS once rather than dozens
//! of times, which is most of a fresh `cargo test`'s time and disk.
//!
//! `request_ids.rs` stays a binary of its own: it installs a process-wide
//! tracing subscriber, which would see every other test's spans.

mod common;

mod cancellation;
mod conditional_writes;
mod conformance;
mod connections;
mod gateway;
mod integrity;
mod metrics;
mod signed_ops;
mod users;
